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
``--cpus 0`` against the defaults to see what the sandbox itself costs a notebook. Above the
table, the executor's whole life from the same file: its CPU in user space and in the kernel
(page faults are charged there) and its page faults, so a slow host can be told apart from a
costly sandbox.
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
from benchmarks.machine import ProcessUsage, process_usage, run_context

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


class TimedRunner(Runner):
    """A :class:`Runner` that records the executor's and its own CPU around every cell."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: dict[int, tuple[float, float]] = {}  # cell index → (sandbox s, trusted s)
        self._seen = (0.0, time.process_time())  # executor CPU, ours, at the last cell's end
        self.usage: ProcessUsage | None = None  # the executor's whole life, at the last cell's end

    def run(self, index, source, *args, **kwargs):
        ran = super().run(index, source, *args, **kwargs)
        # one sandbox per run (profile() refuses a restart), so its executor's CPU only grows
        if self.box is not None:
            self.usage = process_usage(self.box.executor) or self.usage  # the last if it is gone
        usage = self.usage
        sandbox = (usage.user_ticks + usage.system_ticks) / TICKS if usage else self._seen[0]
        ours = time.process_time()
        self.rows[index] = (sandbox - self._seen[0], ours - self._seen[1])
        self._seen = (sandbox, ours)
        return ran


def profile(
    nb: dict, template: Template, demos: Template | None, limits: Limits
) -> tuple[dict[int, tuple[float, float]], ProcessUsage]:
    """One grading of ``nb`` by :func:`autograder.engine.grade` itself: cell index → (the
    executor's CPU, this process's CPU) for it, and what the kernel charged the executor over
    its whole life, its start included. A lesson with demonstrations (``demos``) runs twice
    there, to decide the verdicts and then for the outputs; a cell's row and the usage are both.
    """
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
    usages = [runner.usage for runner in runners if runner.usage is not None]
    if len(usages) != len(runners):
        raise RuntimeError("a sandbox's executor was gone before its usage could be read")
    return rows, ProcessUsage(*(sum(column) for column in zip(*usages, strict=True)))


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
        profiled = [profile(nb, template, demos, limits) for _ in range(max(1, args.runs))]
    runs = [rows for rows, _ in profiled]
    usage = {  # the executor's whole life: where its CPU went (user space or the kernel)
        "user_s": statistics.median(u.user_ticks / TICKS for _, u in profiled),
        "system_s": statistics.median(u.system_ticks / TICKS for _, u in profiled),
        "minor_faults": statistics.median(u.minor_faults for _, u in profiled),
        "major_faults": statistics.median(u.major_faults for _, u in profiled),
    }
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
        "executor": {key: round(value, 3) for key, value in usage.items()},
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
    print(f"the executor's whole life (medians): user {usage['user_s']:.2f} s, "
          f"system {usage['system_s']:.2f} s, {usage['minor_faults']:.0f} minor and "
          f"{usage['major_faults']:.0f} major page faults")  # fmt: skip
    print("| cell | what | sandbox CPU s | share | trusted CPU s |")
    print("|---|---|---|---|---|")
    for row in rows:
        share = row["sandbox_s"] / summary["sandbox_total_s"] if summary["sandbox_total_s"] else 0
        print(f"| {row['cell']} | `{row['what']}` | {row['sandbox_s']:.3f} | {share:.0%} | "
              f"{row['trusted_s']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
