"""The lessons' own solutions keep the input dtype: float32 in, float32 out.

Lesson 01 teaches it (`math.sqrt`, not `np.sqrt`; no `dtype=float`) and the later lessons rely on
it for their float16 and memory discussions, so every solution of a function on float arrays is
run on each float32 probe its checks have, and must answer in float32 where the NumPy reference
does.
"""

from __future__ import annotations

import copy

import nbformat
import numpy as np
import pytest
from course import REPO

from attnlib import checks
from attnlib.checks._core import unpack
from autograder.notebook import setup_only

CASES = [
    pytest.param(lesson, exercise.name, marks=getattr(pytest.mark, f"lesson{lesson[:2]}"))
    for lesson, exercises in checks.LESSONS.items()
    if (REPO / "solutions" / lesson).is_dir()
    for exercise in exercises
]


def solution_namespace(lesson: str) -> dict:
    """What the source notebook's exercise solutions define, on top of its set-up."""
    ns: dict = {}
    for path in sorted((REPO / "solutions" / lesson).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            exercise = meta.get("solution") and meta.get("grade_id") in checks.EXERCISES
            source = cell.source if exercise else setup_only(cell.source)
            exec(compile(source, f"{path.name}:{meta.get('grade_id', '')}", "exec"), ns)
    return ns


@pytest.mark.parametrize(("lesson", "name"), CASES)
def test_solutions_answer_float32_inputs_in_float32(lesson, name):
    exercise = checks.EXERCISES[name]
    fn = solution_namespace(lesson)[name]
    probes = [p for p in exercise.probes() if p.dtype == np.float32]
    for probe in probes:  # results unpacked as the checks do: (out, (K, V)) is three arrays
        got = unpack(exercise.flat(fn(*copy.deepcopy(probe.args), **copy.deepcopy(probe.kwargs))),
                     exercise.outputs)  # fmt: skip
        expected = unpack(exercise.flat(exercise.reference(*probe.args, **probe.kwargs)),
                          exercise.outputs)  # fmt: skip
        for g, e in zip(got, expected, strict=True):
            if e.dtype == np.float32:
                assert g.dtype == np.float32, (name, probe.describe(exercise.parameters), g.dtype)
    assert checks.check(name, fn).message in ("", "correct.")  # no dtype note, either way
