"""A scratch nbgrader course built from this repository, for tests that run real nbgrader."""

from __future__ import annotations

import base64
import fcntl
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
LESSON_IDS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())  # the lessons
BIN = Path(sys.executable).parent  # the venv's bin: nbgrader runs `alembic` from PATH

# Where the suite keeps each set of lessons it has released once (set by tests/conftest.py, one
# folder for all of a run's processes); None releases every course anew.
RELEASES: Path | None = None


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


def children(pid: int) -> dict[int, bytes]:
    """The processes whose parent is ``pid``, with their command lines."""
    found = {}
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"\nPPid:\t{pid}\n" in Path(f"/proc/{child}/status").read_text():
                found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
    return found


def make_course(root: Path, lessons: list[str], extra_config: str = "") -> Path:
    """Copy the course config (plus ``extra_config`` lines) and sources to ``root`` and release
    ``lessons`` there: a copy of the run's first release of the same lessons, when the config is
    the course's own (the gradebook and ``lessons/`` are what ``generate_assignment`` wrote)."""
    if extra_config or RELEASES is None:
        return release(root, lessons, extra_config)
    shutil.copytree(released(lessons), root, dirs_exist_ok=True)
    return root


def release(root: Path, lessons: list[str], extra_config: str = "") -> Path:
    """Make the course at ``root`` with ``nbgrader generate_assignment``, one lesson at a time."""
    config = (REPO / "nbgrader_config.py").read_text(encoding="utf-8")
    (root / "nbgrader_config.py").write_text(config + extra_config, encoding="utf-8")
    shutil.copytree(
        REPO / "solutions", root / "solutions", ignore=shutil.ignore_patterns(".ipynb_*")
    )
    for lesson in lessons:
        done = nbgrader(root, "generate_assignment", lesson, "--force")
        assert done.returncode == 0, f"nbgrader generate_assignment {lesson}:\n{done.stderr}"
    return root


def released(lessons: list[str]) -> Path:
    """The run's course with ``lessons`` released, made by the first process that asks (the
    others wait for it on a lock) and never changed after."""
    assert RELEASES is not None
    key = "+".join(lessons)
    course = RELEASES / key
    RELEASES.mkdir(parents=True, exist_ok=True)
    with open(RELEASES / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not course.exists():
            part = RELEASES / f"{key}.part"
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir()
            course = release(part, lessons).rename(course)
    return course


def figures(path: Path) -> list[tuple[str, np.ndarray]]:
    """Every image a notebook shows: the first line of the cell that showed it, and its pixels
    ``(height, width, 4)`` (RGBA)."""
    shown = []
    for cell in nbformat.read(path, as_version=4).cells:
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                image = Image.open(io.BytesIO(base64.b64decode(png))).convert("RGBA")
                shown.append((cell.source.partition("\n")[0], np.asarray(image)))
    return shown
