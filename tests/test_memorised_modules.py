"""A module right only on the inputs the checks build it with: the module exercises' known
problems, recorded ahead, graded in a batch beside an honest student.

Lesson 06's ``CausalSelfAttention`` has no search: the checks build the learner's class with the
course's weights, run it on fixed inputs, forward and backward, and compare it with the course's
module. Those inputs are public, so a learner can record them in their own kernel (a spy class
handed to the checks, and the lesson's visible test cell) and submit a module that computes
attention right on exactly those and drops the causal mask on any other. With secret problems
(``attn-grade batch --secret-problems N``, docs/grading.md, "Secret problems") each grading also
builds modules of its own sizes, dtype and weights (``Exercise.drawn``), which the module has
never met. The default draws none, so the first batch passes it, as it must for one verdict.
"""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
from course import make_course
from test_grade_students import edit_cell, student_notebook, submit
from test_memorised_problems import batch, last_verdicts
from torch import nn

from attnlib.checks._core import SECRET_NOTE

pytestmark = [pytest.mark.slow, pytest.mark.lesson06]

LESSON = "06-build-and-train"

# The learner's module, right where ``_seen(x)`` says the input was met before.
MODULE = """
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.d_model, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if _seen(x):
            keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        y = self.attn_dropout(torch.softmax(scores, dim=-1)) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, self.d_model))
"""

DIGEST = """
import hashlib


def _digest(x):
    shape = repr((tuple(x.shape), str(x.dtype))).encode()
    return hashlib.sha256(shape + x.detach().contiguous().numpy().tobytes()).hexdigest()
"""


def recorded_inputs() -> set[str]:
    """The digest of every input the checks of CausalSelfAttention and the lesson's visible
    test cell run a module on, as a learner's kernel can record them."""
    from attnlib import checks

    seen: set[str] = set()
    names = {"math": math, "torch": torch, "nn": nn, "hashlib": hashlib}
    exec(DIGEST, names)
    names["_seen"] = lambda x: seen.add(names["_digest"](x)) or True
    exec(MODULE, names)
    spy = names["CausalSelfAttention"]
    assert checks.check("CausalSelfAttention", spy)
    visible = next(
        cell.source
        for cell in student_notebook(LESSON, "release").cells
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_CausalSelfAttention"
    )
    exec(visible, {**names, "CausalSelfAttention": spy})
    return seen


def public_only_notebook():
    nb = student_notebook(LESSON, {})
    known = sorted(recorded_inputs())
    seen = f"\n_PUBLIC = set({known!r})\n\n\ndef _seen(x):\n    return _digest(x) in _PUBLIC\n"
    edit_cell(nb, "CausalSelfAttention", DIGEST + seen + MODULE)
    return nb


def test_a_module_right_only_on_the_checks_own_inputs_fails_on_a_gradings_own(tmp_path):
    course = make_course(tmp_path, [LESSON])
    submit(course, LESSON, "honest", student_notebook(LESSON, {}))
    submit(course, LESSON, "public-only", public_only_notebook())

    public, _ = batch(course, "--secret-problems", "0", lesson=LESSON)
    before = last_verdicts(course, LESSON)
    assert public["public-only"]["score"] == public["honest"]["score"] == 25, public
    assert before["public-only"]["CausalSelfAttention"] == (True, "")  # the hole, by default

    secret, _ = batch(course, "--secret-problems", "10", lesson=LESSON)
    after = last_verdicts(course, LESSON)
    passed, message = after["public-only"]["CausalSelfAttention"]
    assert not passed and message.endswith(SECRET_NOTE), message
    assert "there is no causal mask" in message, message
    assert secret["public-only"]["score"] < 25
    assert secret["honest"]["score"] == 25 and after["honest"] == before["honest"]
