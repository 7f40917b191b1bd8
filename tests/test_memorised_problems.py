"""An answer that looks its results up instead of computing them: a known hole, kept in view.

The checks draw the same problems everywhere (derandomised: the learner's test cell, Validate,
``attn-grade check``, the pytest plugin and the gradebook judge an answer on the same problems).
So a learner can learn them ahead: in their own kernel, hand ``attnlib.checks`` a spy around
``attnlib.numpy.softmax``, record every problem it is given with the right result, and submit a
``softmax`` that finds its argument in that table, saved beside the notebook (a file the
grader hands the sandbox, as it hands it any data file of the learner's). No line of it computes
a softmax, and it is not attnlib's code, so the copy check has nothing to compare.

docs/grading.md, "What does not hold", says what would close it. The test says what should
happen, and is expected to fail until then; when the hole is closed it passes, the strict
expectation fails, and the attack belongs in the hostile corpus (tests/hostile.py).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from test_grade_check import LESSON, check, save
from test_grade_students import edit_cell, student_notebook

pytestmark = [pytest.mark.slow, pytest.mark.lesson02]

LOOKUP = """import pickle

import numpy as np

_RESULTS = pickle.load(open("results.pkl", "rb"))


def softmax(x, axis=-1):
    x = np.asarray(x)
    return _RESULTS.get((x.dtype.str, x.shape, x.tobytes(), axis), np.zeros(x.shape))
"""


def recorded_results() -> dict:
    """Every problem the checks of softmax and the lesson's visible test cell give a right
    answer, with its result, as a learner's kernel can record them (it runs that cell too)."""
    from attnlib import checks
    from attnlib.numpy import softmax

    results = {}

    def spy(x, axis=-1):
        x = np.asarray(x)
        out = softmax(x, axis=axis)
        results[(x.dtype.str, x.shape, x.tobytes(), axis)] = np.array(out, copy=True)
        return out

    assert checks.check("softmax", spy)
    visible = next(
        cell.source
        for cell in student_notebook(LESSON, "release").cells
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax"
    )
    exec(visible, {"np": np, "softmax": spy})
    return results


@pytest.mark.xfail(
    strict=True,
    reason="known hole: the checks' problems are the same everywhere, so they can be recorded "
    "ahead (docs/grading.md, 'What does not hold')",
)
def test_a_table_of_the_checks_own_problems_earns_nothing(tmp_path):
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "softmax", LOOKUP)
    path = save(tmp_path, nb)
    (path.parent / "results.pkl").write_bytes(pickle.dumps(recorded_results()))
    done = check(path, "--no-record")
    assert "softmax" in done.stdout, done.stdout + done.stderr  # the check ran and reported it
    assert "✓ softmax\n" not in done.stdout, done.stdout
