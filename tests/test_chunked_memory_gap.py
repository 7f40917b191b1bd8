"""A naive attention that writes its score matrix into memory it took before the call: a known
hole in lesson 05's memory check, kept in view.

``chunked_attention``'s check measures how much more memory the sandbox holds while the answer
runs on n = 2048 queries and keys than just before (``attnlib.checks.lesson05.chunked_memory``).
A naive attention holds the whole (n, n) matrix of scores and fails it. The same naive attention
fills a buffer of that size that its cell allocated and touched when it ran, before any
measurement, and holds nothing more during the call: the check sees no growth, and the exercise
passes. The problem size is public, as every check's problems are by default.

What would close it counts the memory a call *writes* (the kernel's soft-dirty bits:
``/proc/PID/clear_refs``, then ``/proc/PID/pagemap``), not the memory it adds; the kernel this
course is tested on keeps no soft-dirty bits (the sandbox's check would read none written), so
the first test says what should happen and is expected to fail (docs/grading.md, "What does not
hold"). The second shows the check itself works: the same algorithm without the buffer fails.
"""

from __future__ import annotations

import json

import pytest
from test_grade_check import check, save
from test_grade_students import edit_cell, student_notebook

pytestmark = [pytest.mark.slow, pytest.mark.lesson05]
LESSON = "05-complexity"

NAIVE = '''
import math


def chunked_attention(Q, K, V, block_size, causal=False):
    """Not chunked: the whole score matrix{where}."""
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    m, n = Q.shape[-2], K.shape[-2]
    shape = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2]) + (m, n)
    dtype = np.result_type(Q, K, V, 1.0)
    S = {scores}
    np.matmul(Q, np.swapaxes(K, -1, -2), out=S)
    S *= 1 / math.sqrt(Q.shape[-1])
    if causal:
        hidden = {hidden}
        np.putmask(S, np.broadcast_to(hidden, S.shape), -np.inf)
    S -= S.max(-1, keepdims=True)
    np.exp(S, out=S)
    S /= S.sum(-1, keepdims=True)
    return S @ V
'''
AHEAD = """
_AHEAD = {((2048, 2048), "<f8"): np.ones((2048, 2048))}  # touched now, before any measurement
_HIDDEN = ~np.tril(np.ones((2048, 2048), bool))
"""


def failed(tmp_path, name: str, source: str) -> dict[str, str]:
    """The lesson's notebook with ``source`` as its ``chunked_attention``, checked as grading
    checks it (``attn-grade check``): each exercise it fails, with what the check said."""
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "chunked_attention", source)
    done = check(save(tmp_path, nb, name, lesson=LESSON), "--json", "--no-record", timeout=600)
    report = json.loads(done.stdout)
    return {e["name"]: e["message"] for e in report["exercises"] if not e["passed"]}


@pytest.mark.xfail(strict=True, reason="lesson 05's memory check counts growth, not writes")
def test_a_naive_attention_into_a_buffer_taken_ahead_fails_the_memory_check(tmp_path):
    scores = (
        "_AHEAD.get((shape, dtype.str)) if (shape, dtype.str) in _AHEAD else np.empty(shape, dtype)"
    )
    hidden = "_HIDDEN if (m, n) == (2048, 2048) else ~np.tril(np.ones((m, n), bool))"
    source = AHEAD + NAIVE.format(where=", in a buffer taken ahead", scores=scores, hidden=hidden)
    assert "materialises the whole" in failed(tmp_path, "ahead", source).get(
        "chunked_attention", ""
    )


def test_the_same_naive_attention_fails_it_when_it_takes_its_memory_during_the_call(tmp_path):
    hidden = "~np.tril(np.ones((m, n), bool))"
    source = NAIVE.format(where="", scores="np.empty(shape, dtype)", hidden=hidden)
    said = failed(tmp_path, "during", source)
    assert list(said) == ["chunked_attention"], said
    assert "materialises the whole score matrix" in said["chunked_attention"], said
