"""The batch's own process: the CPU it spends on each submission, which sets a cluster's ceiling.

    .venv/bin/python -m benchmarks.writer [--students 10 50] [--rounds 3] [--workers 2]
                                          [--lesson 02-softmax-masking] [--out benchmarks/results]

``attn-grade batch`` is the gradebook's one writer. Whatever grades the notebooks (its local
workers, or a Dask cluster's), its own process runs nbgrader's steps for every submission, one at
a time: reading and sanitizing it, taking the workers' result, scoring it into the gradebook,
writing the graded notebook. The more workers, the sooner that process is the one everybody
waits for.

This grades a class of each size in ``--students`` (the benchmark's made-up students, as in
:mod:`benchmarks.grading`), each in a fresh ``attn-grade batch`` process on a fresh copy of its
course, ``--rounds`` times (the sizes taken in turn, the order reversed every other round). For
each run it reads the CPU time of the batch's own process (all its threads, ``RUSAGE_SELF``) and
of the whole machine (``/proc/stat``). Between two sizes, the difference over the students added
is what one more submission costs, the start (imports, the pool, the template) left out:

- *the writer*: CPU-seconds of the batch's own process a submission;
- *the rest*: everything else the machine spent a submission (the workers, their templates, the
  sandboxes; on a machine that runs nothing else);
- *workers one batch keeps busy*: (writer + rest) / writer, the one-core workers that grade as
  fast as the writer takes their results; past that, a larger cluster grades no faster.
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
from pathlib import Path

from benchmarks.grading import BIN, make_course
from benchmarks.machine import run_context
from benchmarks.report import command_line, write_down

# The batch as the instructor runs it, writing its CPU into the file sys.argv[1] as it exits.
MEASURED = """\
import atexit, json, os, resource, sys
mine, clock = os.getpid(), os.sysconf("SC_CLK_TCK")

def machine():
    with open("/proc/stat") as f:
        ticks = [int(t) for t in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / clock  # busy: all but idle and iowait

start = machine()

def told():
    if os.getpid() == mine:  # not in a worker the pool forked
        own = resource.getrusage(resource.RUSAGE_SELF)
        with open(told_to, "w") as out:
            json.dump({"writer": own.ru_utime + own.ru_stime, "machine": machine() - start}, out)

told_to = sys.argv.pop(1)
atexit.register(told)
from autograder.cli import main
sys.exit(main(sys.argv[1:]))
"""


def grade(course: Path, lesson: str, workers: int) -> dict:
    """One ``attn-grade batch`` of ``course``: the CPU-seconds of its own process and of the
    machine, and the students it graded."""
    told = course.parent / "cpu.json"
    told.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    args = [str(BIN / "python"), "-c", MEASURED, str(told), "batch", lesson, "--course",
            str(course), "--workers", str(workers), "--no-progress", "--json"]  # fmt: skip
    batch = subprocess.run(args, cwd=course, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    if batch.returncode not in (0, 1) or not told.exists():
        raise SystemExit(f"attn-grade batch failed ({batch.returncode}):\n{batch.stderr[-3000:]}")
    graded = sum(r["status"] == "graded" for r in json.loads(batch.stdout))
    return {**json.loads(told.read_text()), "graded": graded}


def run(sizes: list[int], rounds: int, workers: int, lesson: str, root: Path) -> dict:
    """Every size graded ``rounds`` times, each on a fresh copy of a course built once."""
    courses = {}
    for n in sizes:
        courses[n] = root / f"class-{n}"
        courses[n].mkdir()
        make_course(courses[n], lesson, n)
    runs = []
    for r in range(rounds):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            copy = root / "graded"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(courses[n], copy, symlinks=True)
            found = grade(copy, lesson, workers)
            runs.append({"round": r + 1, "students": n, **found})
            print(f"round {r + 1}, {n} students: the writer {found['writer']:.2f} CPU-s, "
                  f"the machine {found['machine']:.2f}", file=sys.stderr)  # fmt: skip
    return {"context": run_context(), "lesson": lesson, "workers": workers, "sizes": sizes,
            "runs": runs, "rounds": [per_submission(runs, r + 1, sizes)
                                     for r in range(rounds)]}  # fmt: skip


def per_submission(runs: list[dict], round_: int, sizes: list[int]) -> dict:
    """What one more submission cost in round ``round_``, between its smallest and largest
    class."""
    small, large = min(sizes), max(sizes)
    found = {r["students"]: r for r in runs if r["round"] == round_}
    added = large - small
    writer = (found[large]["writer"] - found[small]["writer"]) / added
    rest = (found[large]["machine"] - found[small]["machine"]) / added - writer
    return {"round": round_, "writer": writer, "rest": rest,
            "start": found[small]["writer"] - small * writer,
            "workers": (writer + rest) / writer if writer > 0 else None}  # fmt: skip


def _busy(workers: float | None) -> str:
    """Workers kept busy, or a dash where the writer's difference was none or below zero (the
    host's noise larger than what the students added: classes too close in size)."""
    return "–" if workers is None else f"{workers:.1f}"


def report(result: dict, command: str) -> str:
    rounds = result["rounds"]
    median = {k: statistics.median(r[k] for r in rounds) for k in ("writer", "rest", "start")}
    known = [r["workers"] for r in rounds if r["workers"] is not None]
    busy = statistics.median(known) if known else None
    lines = [
        "# The batch's own process: CPU a submission",
        "",
        f"`{command}`",
        "",
        f"Lesson {result['lesson']}, `attn-grade batch --workers {result['workers']}`, classes "
        f"of {' and '.join(map(str, result['sizes']))}; CPU-seconds, per submission added.",
        "",
        "| round | the writer | the rest | workers one batch keeps busy | the writer's start |",
        "|---|---|---|---|---|",
        *(
            f"| {r['round']} | {r['writer']:.3f} | {r['rest']:.3f} | "
            f"{_busy(r['workers'])} | {r['start']:.2f} |"
            for r in rounds
        ),  # fmt: skip
        f"| median | {median['writer']:.3f} | {median['rest']:.3f} | {_busy(busy)} | "
        f"{median['start']:.2f} |",
        "",
        "| round | students | graded | the writer (CPU-s) | the machine (CPU-s) |",
        "|---|---|---|---|---|",
        *(
            f"| {r['round']} | {r['students']} | {r['graded']} | {r['writer']:.2f} | "
            f"{r['machine']:.2f} |"
            for r in result["runs"]
        ),  # fmt: skip
        "",
        f"- machine: {result['context']['cpu']}, {result['context']['cores']} cores, Python "
        f"{result['context']['python']}, load average {result['context']['load_before']:.2f} "
        "at the start; *the rest* counts whatever else the machine ran",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.writer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--students", type=int, nargs=2, default=[10, 50], metavar=("FEW", "MANY"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lesson", default="02-softmax-masking")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if args.students[0] == args.students[1]:
        parser.error("--students: two different class sizes")
    with tempfile.TemporaryDirectory(prefix="bench-writer-") as scratch:
        result = run(sorted(args.students), args.rounds, args.workers, args.lesson, Path(scratch))
    page = report(result, command_line("benchmarks.writer", argv))
    write_down(args.out, "writer", page, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
