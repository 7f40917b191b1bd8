"""Grade one notebook: run its cells in a sandbox, decide every graded cell on the trusted side.

This is the one engine behind every way in — ``attn-grade batch``, plain ``nbgrader autograde``
with the course's configuration (:mod:`autograder.nbgrader_plugin`), ``attn-grade check`` and
``pytest --attn-notebook`` — so they all reach the same verdicts.

The notebook's code cells run in order in a sandbox (:mod:`autograder.runner`). Before a graded test
cell runs, its hidden checks are run here (:mod:`autograder.scoring`); the cell then runs in the
sandbox with those verdicts (so its ``report`` lines print them), and its outputs are written from
the verdicts (:func:`autograder.outputs.graded`). The result is plain data: per code cell, the
outputs and execution count to store; the verdicts; notes on what went wrong while running.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from . import outputs, scoring
from .limits import Limits
from .runner import Runner
from .template import Template


@dataclass
class Step:
    """One code cell to run: its index, the source to run, and its hidden calls if graded."""

    index: int
    source: str
    calls: list[scoring.Call] | None = None  # None: not a graded test cell


@dataclass
class Graded:
    """What grading one notebook found."""

    cells: dict[int, dict] = field(default_factory=dict)  # index → outputs, execution_count
    verdicts: list[scoring.Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "cells": {str(i): rec for i, rec in self.cells.items()},
            "verdicts": [asdict(v) for v in self.verdicts],
            "notes": self.notes,
            "seconds": self.seconds,
        }


def source_of(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def is_graded_test(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def grading_steps(nb: dict) -> list[Step]:
    """Every code cell, in full; graded test cells with their hidden calls."""
    steps = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = source_of(cell)
        calls = scoring.hidden_calls(index, source) if is_graded_test(cell) else None
        steps.append(Step(index, source, calls))
    return steps


def code_sources(nb: dict) -> list[str]:
    return [source_of(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def run_steps(runner: Runner, steps: list[Step], sources: list[str], found: Graded) -> None:
    """Run ``steps`` in ``runner``; fill ``found`` with outputs and verdicts."""
    for step in steps:
        if step.calls is None:
            ran = runner.run(step.index, step.source)
            found.cells[step.index] = {
                "outputs": ran.outputs,
                "execution_count": ran.execution_count,
            }
            continue
        verdicts = [scoring.check(runner, call, sources) for call in step.calls]
        found.verdicts += verdicts
        ran = runner.run(step.index, step.source, {v.name: v.shown() for v in verdicts})
        found.cells[step.index] = {
            "outputs": outputs.graded(ran.outputs, verdicts),
            "execution_count": ran.execution_count,
        }


def grade(
    nb: dict, template: Template, limits: Limits, files: dict[str, bytes] | None = None
) -> Graded:
    """Grade the (sanitized) notebook ``nb`` in sandboxes from ``template``; see the module doc."""
    started = time.monotonic()
    found = Graded()
    runner = Runner(template, limits, dict(files or {}))
    try:
        run_steps(runner, grading_steps(nb), code_sources(nb), found)
    finally:
        runner.close()
    found.notes = runner.notes
    found.seconds = round(time.monotonic() - started, 3)
    return found
