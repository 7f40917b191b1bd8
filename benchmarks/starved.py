"""What the grader reads when a cell runs out of time: the numbers behind "kept from a processor".

    .venv/bin/python -m benchmarks.starved [--runs 3] [--timeout 3] [--out benchmarks/results]

A cell that runs out of time while other sandboxes ran beside it is graded again, alone, if the
host kept it from a processor (:data:`autograder.runner.STARVED`): over the request, the process
running the cells waited at least a quarter of the time, ready to run, beyond what its own quota
held it back, and the sandbox as a whole used less than three quarters of its quota. Those two
thresholds are the rule's; this measures what a looping cell really shows under each kind of
crowding, in a real sandbox from a warm template, so the margin on each side can be read:

- the cell alone on a quiet host, and a cell that sleeps (neither waits);
- the cell beside 1, 2 and 4 spinning processes per processor (others hold the processors);
- the cell beside spinning processes of its own (its sandbox used its quota);
- the cell after giving its processor away: pinned to a busy one, at nice 19 beside others
  (it waits, by its own choice: :meth:`autograder.limits.Scheduling.given_away`).

Each row gives, over ``--runs`` runs, the median share of the request's time the cell's process
waited, and the median share of its quota the sandbox used (its cgroup's count; as a normal user,
with no quota, its processes' CPU from /proc against one processor), then what the grader
decided.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from autograder import limits as limits_mod
from autograder.limits import Limits
from autograder.runner import STARVED, Runner
from autograder.template import Template
from benchmarks.machine import run_context
from benchmarks.report import command_line, write_down

LESSON = "02-softmax-masking"
SPIN = "while True:\n    pass"
CHILDREN = (  # three spinning children, in the sandbox's own cgroup
    "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\n"
)
PIN = "import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
ALL = "every processor"
FIRST = "the first processor"
# name → (the cell, spinning processes per processor beside it, which processors)
CASES = {
    "sleeps past its timeout": ("import time\ntime.sleep(30)", 0, ALL),
    "loops, quiet host": (SPIN, 0, ALL),
    "loops beside 1 spinner per processor": (SPIN, 1, ALL),
    "loops beside 2 spinners per processor": (SPIN, 2, ALL),
    "loops beside 4 spinners per processor": (SPIN, 4, ALL),
    "loops beside 3 spinning children of its own": (CHILDREN + SPIN, 0, ALL),
    "pinned to a processor 2 spinners hold": (PIN + SPIN, 2, FIRST),
    "at nice 19 beside 1 spinner per processor": ("import os\nos.nice(19)\n" + SPIN, 1, ALL),
}


@contextlib.contextmanager
def spinners(cpus: set[int], each: int) -> Iterator[None]:
    """``each`` spinning processes on every processor in ``cpus``, pinned there: others that
    hold those processors while a sandbox waits."""
    spinning = []
    try:
        for cpu in sorted(cpus):
            for _ in range(each):
                spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                           start_new_session=True)  # fmt: skip
                spinning.append(spinner)
                os.sched_setaffinity(spinner.pid, {cpu})
        yield
    finally:
        for spinner in spinning:
            spinner.kill()
            spinner.wait()


class ReadRunner(Runner):
    """A :class:`Runner` that keeps what :meth:`Runner._starved` decided on."""

    read: tuple[float, float | None] | None = None  # (waited share, used share of the quota)

    def _shares(self, before: tuple, after: tuple, seconds: float) -> tuple | None:
        shares = super()._shares(before, after, seconds)
        self.read = shares or self.read
        return shares


def measure(template: Template, source: str, timeout: float) -> dict:
    """One run of ``source`` as a cell until its timeout: what the grader read and decided."""
    runner = ReadRunner(template, Limits(timeout=timeout, budget=timeout * 10))
    try:
        runner.run(0, source)
    finally:
        runner.close()
    waited, used = runner.read or (None, None)
    return {"out_of_time": runner.out_of_time, "waited": waited, "used": used,
            "starved": runner.starved, "given_away": runner.given_away,
            "crowded": runner.crowded}  # fmt: skip


def run(runs: int, timeout: float, cases: list[str] | None = None) -> dict:
    """The ``cases`` (every one if None), ``runs`` times each, in sandboxes from one warm
    template."""
    mine = os.sched_getaffinity(0)
    rows = {}
    with Template(LESSON) as template:
        for name in cases or list(CASES):
            source, each, where = CASES[name]
            found = []
            with spinners(mine if where == ALL else {min(mine)}, each):
                for _ in range(runs):
                    found.append(measure(template, source, timeout))
            rows[name] = found
    return {"context": run_context(), "runs": runs, "timeout": timeout, "rows": rows}


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def table(result: dict) -> list[str]:
    """The results as a Markdown table, one row a case."""
    lines = [
        "| the cell | waited (share of the time) | sandbox used (share of its quota) | "
        "starved | gave its processor away | graded again (beside others) |",
        "|---|---|---|---|---|---|",
    ]
    for name, found in result["rows"].items():
        again = [r["crowded"] for r in found]
        away = sorted({r["given_away"] for r in found if r["given_away"]})
        lines.append(
            f"| {name} | {_share(_median([r['waited'] for r in found]))} | "
            f"{_share(_median([r['used'] for r in found]))} | "
            f"{sum(r['starved'] for r in found)} of {len(found)} | {'; '.join(away) or 'no'} | "
            f"{sum(again)} of {len(found)} |"
        )
    return lines


def report(result: dict, command: str) -> str:
    context = result["context"]
    capped = limits_mod.can_cap_cpu()
    quota = "as root (a quota of 1 core a sandbox)"
    if not capped:
        quota = "as a normal user (no quota; what a sandbox used counted from /proc)"
    return "\n".join([
        "# What the grader reads when a cell runs out of time",
        "",
        f"`{command}`",
        "",
        f"A looping cell in a sandbox of lesson {LESSON}, {result['timeout']:g} s timeout, "
        f"{result['runs']} runs a case (medians). Starved: waited at least {STARVED:g} of the "
        f"time and used less than {1 - STARVED:g} of its quota (of one processor, with none).",
        "",
        *table(result),
        "",
        f"- machine: {context['cpu']}, {context['cores']} cores, Python {context['python']}, "
        f"load average {context['load_before']:.2f} at the start, {quota}",
        "",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.starved", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (3)")
    parser.add_argument("--timeout", type=float, default=3.0, help="the cell's timeout (3 s)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--case", action="append", choices=list(CASES), help="this case only")
    args = parser.parse_args(argv)
    result = run(args.runs, args.timeout, args.case)
    page = report(result, command_line("benchmarks.starved", argv))
    write_down(args.out, "starved", page, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
