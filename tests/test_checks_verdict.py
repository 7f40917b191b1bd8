"""One verdict, one sentence: what a test cell shows for a right, a wrong and an unwritten answer.

``report`` prints ``✓`` or raises :class:`CheckFailed`, whose text is the diagnosis and the
section to reread, shown by IPython as that one line; a function still to be written says so;
and a function that is right but calls an earlier, wrong one of the learner's is judged right,
with a sentence naming the earlier one.
"""

from __future__ import annotations

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from attnlib import checks
from attnlib.checks import CheckFailed

pytestmark = pytest.mark.lesson02

WRONG_SOFTMAX = "def softmax(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis=0)\n"
MASKED_SOFTMAX = """
def masked_softmax(scores, mask=None):
    scores = np.asarray(scores)
    if mask is None:
        return softmax(scores)
    blocked = np.where(mask, scores, -np.inf)
    rows = np.asarray(mask).any(axis=-1, keepdims=True)
    safe = np.where(rows, blocked, 0.0)
    return np.where(rows & np.broadcast_to(mask, scores.shape), softmax(safe), 0.0)
"""
ATTENTION = """
import math
def attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, mask)
    return weights @ V, weights
"""


def learner(*sources: str) -> dict:
    """The namespace a notebook's cells build, as a kernel would."""
    ns: dict = {"np": np}
    for source in sources:
        exec(source, ns)  # the learner's cells, on purpose
    return ns


def test_a_wrong_answer_raises_one_sentence_and_a_right_one_prints_a_tick(capsys):
    with pytest.raises(CheckFailed) as failed:
        checks.report("softmax", learner(WRONG_SOFTMAX)["softmax"])
    text = str(failed.value)
    assert text.startswith("softmax: softmax normalises over the first axis") and "\n" not in text
    assert "(Read: 02-softmax-masking, " in text
    assert failed.value._render_traceback_() == [f"\x1b[31m✗ {text}\x1b[0m"]
    from attnlib.numpy import softmax

    assert checks.report("softmax", softmax)
    assert capsys.readouterr().out == "✓ softmax: correct.\n"


def test_an_unwritten_exercise_says_so():
    stub = learner(
        "def softmax(x, axis=-1):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    )
    outcome = checks.check("softmax", stub["softmax"])
    assert not outcome and outcome.message.startswith("not written yet: replace `raise")
    # the same for an exercise judged by an extra check only (lesson 06's property test)
    stub = learner("def check_attention(attention_fn):\n    raise NotImplementedError()")
    outcome = checks.check("check_attention", stub["check_attention"])
    assert not outcome and outcome.message.startswith("not written yet: replace `raise")


def test_under_validate_a_verdict_is_wrapped_to_fit_nbgrader_s_report(monkeypatch):
    # nbgrader validate cuts each line of an error at 90 columns; the sentence must not be cut
    text = "chunked_attention: " + " ".join(["the running sum is not rescaled"] * 8)
    assert CheckFailed(text)._render_traceback_() == [f"\x1b[31m✗ {text}\x1b[0m"]
    monkeypatch.setenv("NBGRADER_VALIDATING", "1")
    (shown,) = CheckFailed(text)._render_traceback_()
    lines = shown.removeprefix("\x1b[31m").removesuffix("\x1b[0m").split("\n")
    assert len(lines) > 1 and all(len("    " + line) <= 90 - 3 for line in lines)
    assert " ".join(lines) == f"✗ {text}"


def test_a_mistake_costs_points_in_its_own_exercise_only():
    right = learner(
        "from attnlib.numpy import softmax\n", MASKED_SOFTMAX, ATTENTION
    )  # the reference's softmax: everything right
    assert checks.check("attention", right["attention"]).message == ""
    ns = learner(WRONG_SOFTMAX, MASKED_SOFTMAX, ATTENTION)
    assert not checks.check("softmax", ns["softmax"])
    for name in ("masked_softmax", "attention"):
        outcome = checks.check(name, ns[name])
        assert outcome.passed, outcome
        assert "it fails only because your softmax is wrong" in outcome.message
    theirs = ns["softmax"]
    x = np.array([[0.0, 3.0, 4.0], [1.0, 1.0, 1.0]])  # (m, n)
    with checks.report("masked_softmax", ns["masked_softmax"]):  # the visible tests' block
        assert np.allclose(ns["masked_softmax"](x).sum(axis=-1), 1.0)  # the course's softmax
    assert ns["softmax"] is theirs  # and the learner's own is back afterwards
    assert not np.allclose(ns["masked_softmax"](x).sum(axis=-1), 1.0)


def test_a_missing_earlier_function_costs_nothing_later_and_is_named():
    ns = learner(MASKED_SOFTMAX, ATTENTION)  # softmax's cell failed, so softmax is not defined
    assert "softmax" not in ns
    outcome = checks.check("masked_softmax", ns["masked_softmax"])
    assert outcome.passed and outcome.stand_ins == ("softmax",), outcome
    assert "it fails only because your softmax is not defined" in outcome.message
    assert "softmax" not in ns  # the course's stood in for the check only
    wrong = learner(MASKED_SOFTMAX.replace("softmax(safe)", "softmax(safe, axis=0)"))
    outcome = checks.check("masked_softmax", wrong["masked_softmax"])  # its own mistake
    assert not outcome and "softmax is not defined" not in outcome.message, outcome


def test_a_function_that_is_wrong_itself_is_still_wrong_with_the_references():
    ns = learner(
        WRONG_SOFTMAX, MASKED_SOFTMAX, ATTENTION.replace("math.sqrt(Q.shape[-1])", "Q.shape[-1]")
    )
    outcome = checks.check("attention", ns["attention"])
    assert not outcome and "scaled by d_k" in outcome.message, outcome
    assert "with the course's masked_softmax" not in outcome.message  # it is right on its own
    assert outcome.message.endswith("in place of yours, which is wrong too)")


@pytest.mark.slow
def test_in_a_kernel_the_failed_cell_shows_the_sentence_and_no_traceback():
    nb = new_notebook(cells=[
        new_code_cell("import numpy as np\n" + WRONG_SOFTMAX),
        new_code_cell("from attnlib.checks import report\nreport('softmax', softmax)"),
    ])  # fmt: skip
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3").execute()
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed"
    assert len(error.traceback) == 1 and "normalises over the first axis" in error.traceback[0]
    assert nbformat.validate(nb) is None


def _softmax_in(dtype):
    def softmax(x, axis=-1):
        x = x if dtype is None else x.astype(dtype)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    return softmax


def test_a_right_answer_in_another_float_dtype_passes_with_a_note():
    """float32 inputs answered in float64, or float64 inputs in float32 or float16: right (the
    values are within the tolerance of the coarser dtype), with a note on keeping the input's
    dtype; a softmax that keeps it has none."""
    wider = checks.check("softmax", _softmax_in(np.float64))
    assert wider.passed and "float32 inputs came back as float64" in wider.message
    narrower = checks.check("softmax", _softmax_in(np.float32))
    assert narrower.passed
    assert "float64 inputs came back as float32, which holds about 6 significant" in (
        narrower.message
    )
    half = checks.check("attention", lambda Q, K, V, mask=None: tuple(
        a.astype(np.float16) for a in checks.EXERCISES["attention"].reference(Q, K, V, mask)
    ))  # fmt: skip
    assert half.passed and "came back as float16, which holds about 3 significant" in half.message
    kept = checks.check("softmax", _softmax_in(None))
    assert kept.passed and "note" not in kept.message
