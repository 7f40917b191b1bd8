"""A scratch nbgrader course built from this repository, for tests that run real nbgrader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: nbgrader runs `alembic` from PATH


def env(**extra: str) -> dict[str, str]:
    """The environment for nbgrader: the venv's bin first on PATH."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def nbgrader(course: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course`` and return the finished process (never raises)."""
    return subprocess.run(
        [str(BIN / "nbgrader"), *args],
        cwd=course,
        env=env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def make_course(root: Path, lessons: list[str], extra_config: str = "") -> Path:
    """Copy the course config (plus ``extra_config`` lines) and sources to ``root`` and release
    ``lessons`` there."""
    config = (REPO / "nbgrader_config.py").read_text(encoding="utf-8")
    (root / "nbgrader_config.py").write_text(config + extra_config, encoding="utf-8")
    shutil.copytree(
        REPO / "solutions", root / "solutions", ignore=shutil.ignore_patterns(".ipynb_*")
    )
    for lesson in lessons:
        done = nbgrader(root, "generate_assignment", lesson, "--force")
        assert done.returncode == 0, f"nbgrader generate_assignment {lesson}:\n{done.stderr}"
    return root
