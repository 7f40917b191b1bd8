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

import dataclasses
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from attnlib import checks

from . import outputs, scoring
from .limits import Limits
from .runner import Runner
from .template import Template

# a note on a notebook out of time that waited by its own choice (see Runner._see_scheduling)
GIVEN_AWAY = "out of time after the notebook {}: it waited by its own choice, not graded again"


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
    crowded: bool = False  # a runner's (Runner.crowded): others may be to blame for its time

    def as_dict(self) -> dict:
        return {
            "cells": {str(i): rec for i, rec in self.cells.items()},
            "verdicts": [asdict(v) for v in self.verdicts],
            "notes": self.notes,
            "seconds": self.seconds,
            "crowded": self.crowded,
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


def run_steps(
    runner: Runner,
    steps: list[Step],
    sources: list[str],
    found: Graded,
    decided: dict[int, list[scoring.Verdict]] | None = None,
) -> None:
    """Run ``steps`` in ``runner``; fill ``found`` with outputs and verdicts (mastery answers
    judged as those of ``runner.student``). With ``decided`` (test cell index → verdicts, from a
    run in the verdicts' sandbox) the test cells show those verdicts and none is decided here."""
    for step in steps:
        if step.calls is None:
            ran = runner.run(step.index, step.source)
            found.cells[step.index] = {
                "outputs": ran.outputs,
                "execution_count": ran.execution_count,
            }
            continue
        if decided is None:
            verdicts = [scoring.check(runner, call, sources, runner.student) for call in step.calls]
        else:
            verdicts = decided.get(step.index, [])
        found.verdicts += verdicts
        stand_ins = {dep: checks.EXERCISES[dep].reference for v in verdicts for dep in v.stand_ins}
        ran = runner.run(step.index, step.source, {v.name: v.shown() for v in verdicts},
                         stand_ins)  # fmt: skip
        found.cells[step.index] = {
            "outputs": outputs.graded(ran.outputs, verdicts),
            "execution_count": ran.execution_count,
        }


def explain_missing(nb: dict, run: Graded) -> list[scoring.Verdict]:
    """``run``'s verdicts, where an answer was not defined because its own cell failed in the
    verdicts' sandbox, saying why (the demonstrations' sandbox may have run that cell fine)."""
    failed = {}
    for index, cell in enumerate(nb.get("cells", [])):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        errors = [o for o in run.cells.get(index, {}).get("outputs", [])
                  if o.get("output_type") == "error"]  # fmt: skip
        if meta.get("solution") and meta.get("grade_id") and errors:
            error = errors[0]
            failed[meta["grade_id"]] = f"{error.get('ename')}: {str(error.get('evalue'))[:160]}"
    out = []
    for verdict in run.verdicts:
        why = failed.get(verdict.name)
        if not verdict.passed and why and "is not defined" in verdict.message:
            verdict = dataclasses.replace(verdict, message=(
                f"{verdict.name} is not defined where answers are checked: its cell fails "
                f"there ({why}). The course's own implementations of this lesson's exercises "
                "serve the lesson's figures only; an answer cannot use them"
            ))  # fmt: skip
        out.append(verdict)
    return out


def by_cell(verdicts: list[scoring.Verdict]) -> dict[int, list[scoring.Verdict]]:
    """Verdicts grouped by the test cell they were decided for."""
    cells: dict[int, list[scoring.Verdict]] = {}
    for verdict in verdicts:
        cells.setdefault(verdict.cell, []).append(verdict)
    return cells


def grade(
    nb: dict,
    template: Template,
    limits: Limits,
    files: dict[str, bytes] | None = None,
    student: str = "",
    demos: Template | None = None,
    runner_type: Callable[..., Runner] = Runner,
) -> Graded:
    """Grade the (sanitized) notebook ``nb`` of ``student`` in sandboxes from ``template``; see
    the module doc. ``runner_type`` makes the runners: :class:`Runner`, or what measures each
    cell for a benchmark (``benchmarks.cells``).

    ``demos`` is the template of the demonstrations' edition, for a lesson whose figures need
    the course's implementations of its own exercises (:func:`autograder.view.has_demos`). The
    notebook then runs twice: in a sandbox from ``template``, where those implementations are
    absent, to decide the verdicts (so no answer can delegate to them), and in a sandbox from
    ``demos`` for the outputs, its test cells showing the verdicts already decided.
    """
    started = time.monotonic()
    found = Graded()
    steps, sources = grading_steps(nb), code_sources(nb)
    decided, notes, runners = None, [], []
    waited = 0.0  # for a template still warming: none of the student's budget, nor their time
    if demos is not None:
        first = Graded()
        waited += _warm(template)
        runner = runner_type(template, limits, dict(files or {}), student=student)
        runners.append(runner)
        try:
            run_steps(runner, steps, sources, first)
        finally:
            runner.close()
        explained = explain_missing(nb, first)
        decided, notes, template = by_cell(explained), list(runner.notes), demos
    waited += _warm(template)
    runner = runner_type(template, limits, dict(files or {}), student=student)
    runners.append(runner)
    try:
        run_steps(runner, steps, sources, found, decided)
    finally:
        runner.close()
    chose = [GIVEN_AWAY.format(r.given_away) for r in runners if r.out_of_time and r.given_away]
    found.notes = list(dict.fromkeys(notes + runner.notes + chose))
    found.crowded = any(r.crowded for r in runners)
    found.seconds = round(time.monotonic() - started - waited, 3)
    return found


def _warm(template: Template) -> float:
    """Wait until ``template`` is warm; the seconds waited."""
    began = time.monotonic()
    template.ready()
    return time.monotonic() - began
