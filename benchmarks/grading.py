"""How much faster is ``attn-grade batch`` than ``nbgrader autograde``?

    .venv/bin/python -m benchmarks.grading [--students 30] [--lesson 02-softmax-masking]
                                           [--workers 2] [--keep DIR]

Builds a scratch nbgrader course from this repository (``nbgrader generate_assignment``), submits
``--students`` notebooks made from the lesson's source notebook — honest ones and classic bugs
(the made-up students of tests/test_grade_students.py, in turn) — copies the course, and times
``nbgrader autograde LESSON`` on one copy and ``attn-grade batch LESSON`` on the other (wall
clock, each a fresh process, as an instructor would run them). It then checks that both
gradebooks give every student the same score and prints a Markdown table (results are written
down in benchmarks/grading.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "tests"))

from test_grade_students import STUDENTS, student_notebook, submit  # noqa: E402


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _run(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(
        args, cwd=cwd, env=_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return time.perf_counter() - started, done


def make_course(root: Path, lesson: str, students: int) -> list[str]:
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(
        REPO / "solutions" / lesson,
        root / "solutions" / lesson,
        ignore=shutil.ignore_patterns(".ipynb_*"),
    )
    _, done = _run([str(BIN / "nbgrader"), "generate_assignment", lesson, "--force"], root)
    if done.returncode:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{done.stderr}")
    kinds = list(STUDENTS[lesson].items())
    names = []
    for n in range(students):
        kind, edits = kinds[n % len(kinds)]
        name = f"s{n:03d}-{kind}"
        submit(root, lesson, name, student_notebook(lesson, edits))
        names.append(name)
    return names


def scores(course: Path, lesson: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.find_assignment(lesson).submissions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--lesson", default="02-softmax-masking")
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1)
    parser.add_argument("--keep", type=Path, help="build the courses here and keep them")
    args = parser.parse_args(argv)

    base = args.keep or Path(tempfile.mkdtemp(prefix="attn-grade-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    ours, theirs = base / "attn-grade", base / "nbgrader"
    for path in (ours, theirs):
        shutil.rmtree(path, ignore_errors=True)
    ours.mkdir()
    names = make_course(ours, args.lesson, args.students)
    shutil.copytree(ours, theirs)

    t_nbgrader, done = _run([str(BIN / "nbgrader"), "autograde", args.lesson], theirs)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
    t_ours, done = _run(
        [
            str(BIN / "attn-grade"),
            "batch",
            args.lesson,
            "--course",
            str(ours),
            "--workers",
            str(args.workers),
            "--no-progress",
        ],
        ours,
    )
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)

    a, b = scores(ours, args.lesson), scores(theirs, args.lesson)
    differ = sorted(n for n in names if a.get(n) != b.get(n))
    n = len(names)
    print(
        f"| lesson | submissions | nbgrader autograde | attn-grade batch (--workers "
        f"{args.workers}) | speed-up |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| {args.lesson} | {n} | {t_nbgrader:.1f} s ({t_nbgrader / n:.2f} s each) | "
        f"{t_ours:.1f} s ({t_ours / n:.2f} s each) | **{t_nbgrader / t_ours:.1f}×** |"
    )
    print(
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print("same score for every student:", "yes" if not differ else f"NO: {differ}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
