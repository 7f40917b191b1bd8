"""Where one submission's CPU goes, cell by cell, in a real sandbox.

    .venv/bin/python -m benchmarks.cells [--lesson 02-softmax-masking] [--runs 5]
                                         [--isolation namespaces|none] [--cpus 1] [--json]

Grades a lesson's source notebook (the solutions, so every check passes) ``--runs`` times with
the grader's own engine (:func:`autograder.engine.grade`, in sandboxes from a warm template, as
``attn-grade batch`` does; twice for a lesson whose demonstrations need its own exercises,
lesson 06) and reads, around every code cell, the CPU time the kernel has charged to the
sandbox's executor — the process that runs the learner's cells — from ``/proc/PID/stat``. A
graded test cell's row includes the calls its hidden checks made into the sandbox just before
it. Beside each row: the CPU this (trusted) process spent on the step, the hidden checks and
the protocol.

The table shows the median of each row over the runs, the heaviest first; the grader's other
costs (nbgrader's pipeline in the batch's process, the template's start) are not in it:
``python -m benchmarks.grading`` measures the whole batch. Compare ``--isolation none`` or
``--cpus 0`` against the defaults to see what the sandbox itself costs a notebook.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat

from autograder import engine, view
from autograder.limits import Limits
from autograder.runner import Runner
from autograder.template import Template
from benchmarks.machine import process_ticks, run_context

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU the kernel has charged to process ``pid`` (0 once it is gone)."""
    return (process_ticks(pid) or 0) / TICKS


class TimedRunner(Runner):
    """A :class:`Runner` that records the executor's and its own CPU around every cell."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: dict[int, tuple[float, float]] = {}  # cell index → (sandbox s, trusted s)
        self._seen = (0.0, time.process_time())  # executor CPU, ours, at the last cell's end

    def run(self, index, source, *args, **kwargs):
        ran = super().run(index, source, *args, **kwargs)
        # one sandbox per run (profile() refuses a restart), so its executor's CPU only grows
        sandbox = cpu_seconds(self.box.executor) if self.box is not None else self._seen[0]
        ours = time.process_time()
        self.rows[index] = (sandbox - self._seen[0], ours - self._seen[1])
        self._seen = (sandbox, ours)
        return ran


def profile(
    nb: dict, template: Template, demos: Template | None, limits: Limits
) -> dict[int, tuple[float, float]]:
    """One grading of ``nb`` by :func:`autograder.engine.grade` itself: cell index → (the
    executor's CPU, this process's CPU) for it. A lesson with demonstrations (``demos``) runs
    twice there, to decide the verdicts and then for the outputs; a cell's row is both."""
    runners: list[TimedRunner] = []

    def timed(*args, **kwargs) -> TimedRunner:
        runners.append(TimedRunner(*args, **kwargs))
        return runners[-1]

    engine.grade(nb, template, limits, demos=demos, runner_type=timed)
    rows: dict[int, tuple[float, float]] = {}
    for runner in runners:
        if runner.launches != 1:
            raise RuntimeError(f"the sandbox was started {runner.launches} times: {runner.notes}")
        for index, (sandbox, ours) in runner.rows.items():
            before = rows.get(index, (0.0, 0.0))
            rows[index] = (before[0] + sandbox, before[1] + ours)
    return rows


def first_line(nb: dict, index: int) -> str:
    cell = nb["cells"][index]
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    text = engine.source_of(cell).strip().splitlines()
    return grade_id or (text[0][:60] if text else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default="02-softmax-masking")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--isolation", choices=("namespaces", "none"), default="namespaces")
    parser.add_argument("--cpus", type=float, default=1.0, help="the sandbox's CPU quota (0: none)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    path = REPO / "solutions" / args.lesson / f"{args.lesson}.ipynb"
    if not path.is_file():
        parser.error(f"no source notebook {path}")
    nb = nbformat.read(path, as_version=4)
    limits = Limits(timeout=120, budget=1200, cpus=args.cpus)
    context = run_context()
    with contextlib.ExitStack() as stack:
        template = stack.enter_context(Template(args.lesson, args.isolation))
        demos = (
            stack.enter_context(Template(args.lesson, args.isolation, demos=True))
            if view.has_demos(args.lesson)
            else None
        )
        runs = [profile(nb, template, demos, limits) for _ in range(max(1, args.runs))]
    cells = sorted(runs[0], key=lambda i: -statistics.median(r[i][0] for r in runs))
    rows = [
        {
            "cell": i,
            "what": first_line(nb, i),
            "sandbox_s": round(statistics.median(r[i][0] for r in runs), 3),
            "trusted_s": round(statistics.median(r[i][1] for r in runs), 3),
        }
        for i in cells
    ]
    totals = [sum(s for s, _ in r.values()) for r in runs]
    summary = {
        "lesson": args.lesson,
        "runs": len(runs),
        "isolation": args.isolation,
        "cpus": args.cpus,
        "sandbox_total_s": round(statistics.median(totals), 3),
        "trusted_total_s": round(statistics.median(sum(t for _, t in r.values()) for r in runs), 3),
        "machine": context,
        "cells": rows,
    }
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    print(f"{args.lesson}: {len(runs)} gradings, isolation {args.isolation}, cpus {args.cpus:g}; "
          f"{context['cpu']}, {context['cores']} cores")  # fmt: skip
    print(f"sandbox CPU per notebook (median): {summary['sandbox_total_s']:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in totals)}); "
          f"this process: {summary['trusted_total_s']:.2f} s")  # fmt: skip
    print("| cell | what | sandbox CPU s | share | trusted CPU s |")
    print("|---|---|---|---|---|")
    for row in rows:
        share = row["sandbox_s"] / summary["sandbox_total_s"] if summary["sandbox_total_s"] else 0
        print(f"| {row['cell']} | `{row['what']}` | {row['sandbox_s']:.3f} | {share:.0%} | "
              f"{row['trusted_s']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
