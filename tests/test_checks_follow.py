"""Figures before code: until the learner's function works, a demonstration uses the course's.

In a real kernel: a demonstration cell that calls an unwritten ``softmax`` runs with the course's
and says so in one line; the learner's own test cell still fails with its verdict; once their
``softmax`` is right, demonstrations use it, silently.
"""

from __future__ import annotations

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = [pytest.mark.lesson02, pytest.mark.slow]

RIGHT = """def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)"""


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_demonstrations_run_before_the_exercise_does_and_verdicts_stay_the_learners():
    nb = new_notebook(cells=[
        new_code_cell('from attnlib import lesson\nlesson.begin("02-softmax-masking")'),
        new_code_cell("import numpy as np\n"
                      "def softmax(x, axis=-1):\n    raise NotImplementedError()"),
        new_code_cell("print(softmax(np.zeros(2)))"),  # a demonstration
        new_code_cell("from attnlib.checks import report\nwith report('softmax', softmax):\n"
                      "    pass", metadata={"tags": ["raises-exception"]}),
        new_code_cell("print(softmax.__module__)"),  # names it without calling it
        new_code_cell(RIGHT),
        new_code_cell("print(softmax(np.zeros(4)))"),
    ])  # fmt: skip
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    begin, _, demo, test, direct, _, later = nb.cells
    assert "02-softmax-masking" in printed(begin) or "Lesson 01" in printed(begin)
    assert (
        printed(demo)
        == "(this cell uses the course's softmax: yours is not written yet)\n[0.5 0.5]\n"
    )
    (error,) = [o for o in test.outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed" and "not written yet" in error.evalue
    assert printed(direct) == "__main__\n"  # the learner's own is back after each cell
    assert printed(later) == "[0.25 0.25 0.25 0.25]\n"  # the learner's own, silently


def test_a_function_of_the_notebook_that_calls_the_exercise_is_followed_into():
    nb = new_notebook(cells=[
        new_code_cell('from attnlib import lesson\nlesson.begin("02-softmax-masking")'),
        new_code_cell("import numpy as np\n"
                      "def causal_mask(T):\n    raise NotImplementedError()"),
        # A demonstration that defines a helper whose (nested) body calls the exercise ...
        new_code_cell("def allowed(T):\n    def mask():\n        return causal_mask(T)\n"
                      "    return int(mask().sum())\n\nprint(allowed(3))"),
        # ... and a later one that calls the helper without naming the exercise.
        new_code_cell("print(allowed(4))"),
        new_code_cell("from attnlib.checks import report\n"
                      "with report('causal_mask', causal_mask):\n    pass",
                      metadata={"tags": ["raises-exception"]}),
        # A cell that defines the exercise runs as written, helper and all.
        new_code_cell("def causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool))\n\n"
                      "print(allowed(2))"),
        new_code_cell("print(allowed(5))"),
    ])  # fmt: skip
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    _, _, defines, calls, test, written, later = nb.cells
    note = "(this cell uses the course's causal_mask: yours is not written yet)\n"
    assert printed(defines) == note + "6\n"
    assert printed(calls) == note + "10\n"
    (error,) = [o for o in test.outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed" and "not written yet" in error.evalue
    assert printed(written) == "3\n"  # the learner's own, in the cell that defines it
    assert printed(later) == "15\n"  # and after it, silently


@pytest.mark.lesson06
def test_in_a_pytorch_lesson_the_stand_in_is_attnlib_torch():
    wrong = ("def induction_score(weights, period):\n"
             "    T = weights.shape[-1]\n"
             "    queries = torch.arange(period, T)\n"
             "    return weights[..., queries, queries - period].mean(dim=-1)")  # fmt: skip
    nb = new_notebook(cells=[
        new_code_cell('from attnlib import lesson\nlesson.begin("06-build-and-train")'),
        new_code_cell("import torch\n" + wrong),
        new_code_cell("score = induction_score(torch.full((2, 4, 4), 0.25), 2).mean(0)\n"
                      "print(type(score).__name__, score.numpy())"),
    ])  # fmt: skip
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert printed(nb.cells[2]) == (
        "(this cell uses the course's induction_score: yours is not right yet)\nTensor 0.25\n"
    )
