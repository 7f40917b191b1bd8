"""Grading throughput and the cost of isolation, on the real course.

    .venv/bin/python -m benchmarks.grading [--students 30] [--lesson 02-softmax-masking]
                                           [--workers N] [--spawns 20] [--out DIR] [--keep DIR]
                                           [--scaling 1 2 4] [--rounds 1]

Builds a scratch nbgrader course from this repository (``nbgrader generate_assignment``) and
submits ``--students`` notebooks made from the lesson's source notebook — honest ones and classic
bugs, the made-up students of tests/test_grade_students.py in turn (for a lesson with none
there, the honest solution and the blank release in turn). Then, each on its own copy of
the course, as an instructor would run them (wall clock of the whole command, a fresh process):

* ``nbgrader autograde`` with nbgrader's **stock** pipeline (a Jupyter kernel per notebook, the
  hidden checks inside it): the baseline;
* ``nbgrader autograde`` with the course's ``nbgrader_config.py`` (the trusted engine, sandboxed,
  one notebook at a time);
* ``attn-grade batch`` (the same engine, ``--workers`` at a time), isolated, and again with
  ``--no-isolation``: the difference per student is what isolation costs in a batch;
* ``attn-grade batch --dask local:N`` for every N of ``--scaling`` (default 1, 2, 4): the same
  engine on a Dask ``LocalCluster`` of N single-threaded workers, to see how it scales.

Then the feedback pages of the class the batch graded, on two copies of it: ``nbgrader
generate_feedback`` against ``attn-grade feedback --workers N`` (the same files, byte for byte).

With ``--rounds N`` the class is graded every way N times, the ways in turn (the opposite order
every other round), and each way's median is reported, with its range and the speed-up of each
round: one run's ratio moves with the machine's speed from minute to minute.

It checks that every way gives every student the same score (in every round), and measures the
sandbox alone: ``--spawns`` times, a fresh sandbox is started, runs one cell and is torn down,
with namespaces and without. Results go to ``DIR/grading.md`` and ``DIR/grading.json`` (default
``benchmarks/results/``); ``benchmarks/grading.md`` explains them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(REPO / "tests"))

from test_grade_students import STUDENTS, student_notebook, submit  # noqa: E402

from benchmarks.machine import run_context  # noqa: E402

STOCK_CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "lessons"
c.ExecutePreprocessor.timeout = 120
"""


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
    # a lesson with no made-up students of its own: honest ones and blank releases, in turn
    kinds = list(STUDENTS.get(lesson, {"honest": {}, "blank": "release"}).items())
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


def spawn_seconds(lesson: str, isolation: str, spawns: int) -> list[float]:
    """Seconds to start a sandbox, run one cell in it and tear it down, ``spawns`` times."""
    from autograder.limits import Limits
    from autograder.runner import Runner
    from autograder.template import Template

    out = []
    with Template(lesson, isolation) as template:
        for _ in range(spawns + 1):  # the first warms the template's page cache
            started = time.perf_counter()
            runner = Runner(template, Limits(timeout=30))
            runner.run(0, "x = 1")
            runner.close()
            out.append(time.perf_counter() - started)
    return out[1:]


def grade_all_ways(
    base: Path, lesson: str, students: int, workers: int, scaling: list[int] = (), rounds: int = 1
) -> dict:
    """Build the course, grade a copy of it every way, ``rounds`` times (the ways in turn, in
    the opposite order every other round, so a drift of the machine's speed falls on all of
    them); each way's seconds in every round, and the scores. ``scaling``: Dask
    ``LocalCluster`` sizes to grade it on as well (``attn-grade batch --dask local:N``)."""
    ways = {
        "nbgrader, stock pipeline": None,
        "nbgrader, course pipeline": None,
        "attn-grade batch": ["--workers", str(workers)],
        "attn-grade batch --no-isolation": ["--workers", str(workers), "--no-isolation"],
    }
    for n in scaling:
        ways[f"attn-grade batch --dask local:{n}"] = ["--dask", f"local:{n}"]
    first = base / "course"
    first.mkdir()
    names = make_course(first, lesson, students)
    found = {way: {"seconds": [], "scores": []} for way in ways}
    for round_ in range(rounds):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for way in order:
            course = base / f"way{list(ways).index(way)}-{round_}"
            shutil.copytree(first, course)
            seconds, graded = grade_one_way(course, lesson, ways[way], way)
            found[way]["seconds"].append(seconds)
            found[way]["scores"].append(graded)
    batch = base / f"way{list(ways).index('attn-grade batch')}-{rounds - 1}"
    feedback = feedback_both_ways(base, batch, lesson, workers)
    baseline = found["nbgrader, stock pipeline"]["scores"][0]
    differ = sorted(
        {
            name
            for way in found.values()
            for graded in way["scores"]
            for name in names
            if graded.get(name) != baseline.get(name)
        }
    )
    return {"names": names, "ways": found, "differ": differ, "feedback": feedback}


def grade_one_way(
    course: Path, lesson: str, options: list[str] | None, way: str
) -> tuple[float, dict[str, float]]:
    """Grade ``course`` one way (``options`` of ``attn-grade batch``, or None: ``nbgrader
    autograde``, with nbgrader's own configuration for the stock pipeline); the seconds it took
    and the scores."""
    if way == "nbgrader, stock pipeline":
        (course / "nbgrader_config.py").write_text(STOCK_CONFIG)
    if options is None:
        args = [str(BIN / "nbgrader"), "autograde", lesson]
    else:
        args = [str(BIN / "attn-grade"), "batch", lesson, "--course", str(course),
                "--no-progress", "--json", *options]  # fmt: skip
    seconds, done = _run(args, course)
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-3000:], file=sys.stderr)
    return seconds, scores(course, lesson)


def feedback_both_ways(base: Path, graded: Path, lesson: str, workers: int) -> dict:
    """The class's feedback pages, written by ``nbgrader generate_feedback`` and by
    ``attn-grade feedback --workers N``, each on its own copy of the graded course: the seconds
    each took, and whether they wrote the same files."""
    commands = {
        "nbgrader generate_feedback": [str(BIN / "nbgrader"), "generate_feedback", lesson],
        f"attn-grade feedback (--workers {workers})": [
            str(BIN / "attn-grade"), "feedback", lesson, "--course", ".", "--no-progress",
            "--workers", str(workers),
        ],
    }  # fmt: skip
    seconds, pages = {}, []
    for n, (way, args) in enumerate(commands.items()):
        course = base / f"feedback{n}"
        shutil.copytree(graded, course, ignore=shutil.ignore_patterns("feedback"))
        seconds[way], done = _run(args, course)
        if done.returncode:
            print(done.stdout[-2000:], done.stderr[-3000:], file=sys.stderr)
        folder = course / "feedback"
        pages.append({str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*")
                      if f.is_file()})  # fmt: skip
    return {"seconds": seconds, "same_pages": bool(pages[0]) and pages[0] == pages[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--lesson", default="02-softmax-masking")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", type=Path, help="build the courses here and keep them")
    parser.add_argument(
        "--scaling",
        type=int,
        nargs="*",
        default=[1, 2, 4],
        help="Dask LocalCluster sizes to grade on too (none: skip)",
    )
    parser.add_argument("--rounds", type=int, default=1,
                        help="grade the class every way N times; medians")  # fmt: skip
    args = parser.parse_args(argv)
    args.rounds = max(1, args.rounds)

    from autograder import view

    problem = view.probe()
    if problem:
        raise SystemExit(f"cannot measure isolation here: {problem}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="attn-grade-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        spawn = {
            mode: spawn_seconds(args.lesson, mode, args.spawns) for mode in ("namespaces", "none")
        }
        graded = grade_all_ways(
            base, args.lesson, args.students, args.workers, args.scaling, args.rounds
        )
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    n = args.students
    ways = graded["ways"]
    median = {way: statistics.median(v["seconds"]) for way, v in ways.items()}
    stock, ours = median["nbgrader, stock pipeline"], median["attn-grade batch"]
    bare = median["attn-grade batch --no-isolation"]
    each_round = zip(
        ways["nbgrader, stock pipeline"]["seconds"],
        ways["attn-grade batch"]["seconds"],
        strict=True,
    )
    result = {
        "lesson": args.lesson,
        "students": n,
        "workers": args.workers,
        "rounds": args.rounds,
        "machine": {
            **run_context(),
            "as_root": os.geteuid() == 0,
        },
        "seconds": {way: round(v, 2) for way, v in median.items()},
        "seconds_each_round": {way: [round(s, 2) for s in v["seconds"]] for way, v in ways.items()},
        "speedup_vs_stock": round(stock / ours, 2),
        "speedup_each_round": [round(a / b, 2) for a, b in each_round],
        "isolation_per_student_s": round((ours - bare) / n, 3),
        "sandbox_spawn_s": {
            mode: {"median": round(statistics.median(v), 4), "max": round(max(v), 4)}
            for mode, v in spawn.items()
        },
        "same_scores": not graded["differ"],
        "differ": graded["differ"],
        "feedback_seconds": {k: round(v, 2) for k, v in graded["feedback"]["seconds"].items()},
        "same_feedback_pages": graded["feedback"]["same_pages"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grading.json").write_text(json.dumps(result, indent=2) + "\n")
    table = report_markdown(result, argv if argv is not None else sys.argv[1:])
    (args.out / "grading.md").write_text(table)
    print(table)
    return 0 if result["same_scores"] and result["same_feedback_pages"] else 1


def report_markdown(r: dict, argv: list[str]) -> str:
    n, rounds = r["students"], r["rounds"]
    clock = "wall clock" if rounds == 1 else f"wall clock (median of {rounds} rounds)"
    lines = [
        f"# Grading {n} submissions of {r['lesson']}",
        "",
        f"`python -m benchmarks.grading {' '.join(argv)}`".replace(" `", "`"),
        "",
        f"| way | {clock} | per submission | speed-up over stock nbgrader |",
        "|---|---|---|---|",
    ]
    stock = r["seconds"]["nbgrader, stock pipeline"]
    for way, seconds in r["seconds"].items():
        dask = "--dask" in way
        label = (
            way if not way.startswith("attn-grade") or dask else f"{way} (--workers {r['workers']})"
        )
        each = r["seconds_each_round"][way]
        spread = f" ({min(each):.1f}–{max(each):.1f})" if rounds > 1 else ""
        lines.append(
            f"| {label} | {seconds:.1f} s{spread} | {seconds / n:.2f} s | {stock / seconds:.1f}× |"
        )
    lines.append("")
    if rounds > 1:
        ratios = ", ".join(f"{x:.1f}×" for x in r["speedup_each_round"])
        lines.append(f"- `attn-grade batch` over stock nbgrader, round by round: {ratios}")
    spawn = r["sandbox_spawn_s"]
    ns, none = spawn["namespaces"], spawn["none"]
    same = "yes" if r["same_scores"] else "NO: " + ", ".join(r["differ"])
    lines += [
        f"- isolation in the batch: **{r['isolation_per_student_s']:+.3f} s per submission** "
        "(isolated minus `--no-isolation`, same workers)",
        f"- one sandbox started, one cell run, torn down: median {ns['median']:.3f} s with "
        f"namespaces, {none['median']:.3f} s without (max {ns['max']:.3f} s and "
        f"{none['max']:.3f} s)",
        f"- same score for every student, every way: {same}",
        "- feedback pages for the class graded by `attn-grade batch`: "
        + ", ".join(
            f"{way} {v:.1f} s ({v / n:.2f} s per student)"
            for way, v in r["feedback_seconds"].items()
        )  # fmt: skip
        + f"; the same files both ways: {'yes' if r['same_feedback_pages'] else 'NO'}",
        f"- machine: {r['machine']['cpu']}, {r['machine']['cores']} cores, Python "
        f"{r['machine']['python']}, load average {r['machine']['load_before']:.2f} at the start, "
        f"{'as root (cgroups)' if r['machine']['as_root'] else 'not root (watchdog)'}",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
