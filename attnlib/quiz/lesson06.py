"""Mastery check of lesson 06-build-and-train, with numbers of the learner's own.

Every question is parameterised per learner: :func:`numbers` draws the learner's numbers from
:func:`attnlib.quiz.learner_rng` (seeded by the lesson and :func:`attnlib.quiz.learner_id`), the
prompt shows them, and the checker recomputes the right answer from the same draw — with
:mod:`attnlib.numpy` or the Torch module itself where it can. Two learners get different numbers;
one learner gets the same numbers in every session and on every machine.

q1–q3 are about this lesson (a KV cache's memory, softmax's backward pass, what induction and
previous-token heads look at); q4–q6 are spaced review of lessons 01–05 (masked scaled
dot-product attention, a layer's parameters, the cost of attention).

For a grader that knows the learner from elsewhere, :func:`check` and :func:`expected` take the
learner explicitly (``check("q1", answer, learner="alice")``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from .. import numpy as an
from . import Question
from .answers import as_int, as_number, items
from .lesson05 import _as_bytes
from .sheet06 import _PROMPTS, LESSON, numbers

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


def _topic(section: str) -> str:
    return f"{LESSON}, '{section}'"


def _safe(check: Callable[[object, dict], bool]) -> Callable[[object, str | None], bool]:
    """A checker that reads the learner's numbers and never raises on a strange answer."""

    def run(answer: object, learner: str | None = None) -> bool:
        try:
            return bool(check(answer, numbers(learner)))
        except Exception:  # noqa: BLE001 — a malformed answer is simply not right
            return False

    run.__doc__ = check.__doc__
    return run


def _numbers_of(answer: object, count: int) -> list[float] | None:
    """``count`` finite numbers from a list, tuple or 1-D array (or tensor), else None."""
    if hasattr(answer, "detach"):
        answer = answer.detach().cpu().numpy()
    if isinstance(answer, np.ndarray) and answer.ndim == 2 and 1 in answer.shape:
        answer = answer.reshape(-1)
    elements = items(answer)
    if elements is None or len(elements) != count:
        return None
    values = [as_number(e) for e in elements]
    return None if any(v is None for v in values) else values


# ---------------------------------------------------------------- q1: memory of a KV cache


def _q1_expected(n: dict) -> int:
    p = n["q1"]
    # Per layer the cache holds K and V, each (batch, heads, context, d_head).
    elements = 2 * p["layers"] * p["batch"] * p["heads"] * p["context"] * p["d_head"]
    return elements * ITEMSIZE[p["dtype"]]


@_safe
def _q1(answer: object, n: dict) -> bool:
    expected = _q1_expected(n)
    return any(math.isclose(v, expected, rel_tol=1e-2) for v in _as_bytes(answer))


# ---------------------------------------------------------------- q2: softmax backward


def _q2_expected(n: dict) -> np.ndarray:
    p = n["q2"]
    y = an.softmax(np.array(p["x"], dtype=float))  # (3,)
    return an.softmax_backward(y, np.array(p["grad_y"], dtype=float))  # (3,)


@_safe
def _q2(answer: object, n: dict) -> bool:
    values = _numbers_of(answer, 3)
    return values is not None and np.allclose(values, _q2_expected(n), rtol=0, atol=5e-3)


# ---------------------------------------------------------------- q3: where the heads look


def _q3_expected(n: dict) -> tuple[int, int]:
    p = n["q3"]
    period, i = p["period"], p["query"]
    # Token i equals token i - period; the one after that earlier occurrence is at
    # i - period + 1 (what an induction head copies); the previous token is at i - 1.
    return i - period + 1, i - 1


@_safe
def _q3(answer: object, n: dict) -> bool:
    if isinstance(answer, Mapping):
        answer = [answer.get("induction"), answer.get("previous")]
    elements = items(answer)
    if elements is None or len(elements) != 2:
        return False
    if any(isinstance(e, float | np.floating) and not float(e).is_integer() for e in elements):
        return False
    keys = tuple(as_int(e) for e in elements)
    return keys == _q3_expected(n)


# ---------------------------------------------------------------- q4 (review 01-02): weights


def _q4_expected(n: dict) -> np.ndarray:
    p = n["q4"]
    Q = np.array([p["q"]], dtype=float)  # (1, d_k)
    K = np.array(p["K"], dtype=float)  # (3, d_k)
    mask = np.arange(3) != p["masked"]  # (3,), True = may attend
    _, weights = an.attention(Q, K, np.zeros((3, 1)), mask=mask[None])  # (1, 3)
    return weights[0]


@_safe
def _q4(answer: object, n: dict) -> bool:
    values = _numbers_of(answer, 3)
    return values is not None and np.allclose(values, _q4_expected(n), rtol=0, atol=2e-3)


# ---------------------------------------------------------------- q5 (review 03-04): parameters


def _q5_expected(n: dict) -> int:
    import torch

    from ..torch import CausalSelfAttention

    p = n["q5"]
    # Count the module's own parameters (on the meta device: nothing is allocated).
    layer = CausalSelfAttention(p["d_model"], p["n_heads"], device=torch.device("meta"))
    return sum(t.numel() for t in layer.parameters())


@_safe
def _q5(answer: object, n: dict) -> bool:
    value = as_number(answer)
    return value is not None and value == _q5_expected(n)


# ---------------------------------------------------------------- q6 (review 05): the work


def _q6_expected(n: dict) -> int:
    p = n["q6"]
    return p["heads"] * an.attention_flops(p["n"], p["n"], p["d_head"], p["d_head"])


@_safe
def _q6(answer: object, n: dict) -> bool:
    value = as_number(answer)
    return value is not None and math.isclose(value, _q6_expected(n), rel_tol=1e-3)


# ---------------------------------------------------------------- for graders and the notebook

_CHECKS = {"q1": _q1, "q2": _q2, "q3": _q3, "q4": _q4, "q5": _q5, "q6": _q6}
_EXPECTED = {
    "q1": _q1_expected,
    "q2": _q2_expected,
    "q3": _q3_expected,
    "q4": _q4_expected,
    "q5": _q5_expected,
    "q6": _q6_expected,
}


def _key(key: str) -> str:
    if key not in _CHECKS:
        raise ValueError(f"lesson {LESSON} has no question {key!r}; it has {', '.join(_CHECKS)}")
    return key


def check(key: str, answer: object, learner: str | None = None) -> bool:
    """Is ``answer`` right for question ``key`` with ``learner``'s numbers?"""
    return _CHECKS[_key(key)](answer, learner)


def expected(key: str, learner: str | None = None):
    """The right answer to question ``key`` for ``learner`` (for instructors and tests)."""
    return _EXPECTED[_key(key)](numbers(learner))


QUESTIONS = (
    Question(
        key="q1",
        prompt=_PROMPTS["q1"],
        topic=_topic("Decoding fast: the KV cache"),
        check=lambda answer: _q1(answer),
    ),
    Question(
        key="q2",
        prompt=_PROMPTS["q2"],
        topic=_topic("Attention, backwards"),
        check=lambda answer: _q2(answer),
    ),
    Question(
        key="q3",
        prompt=_PROMPTS["q3"],
        topic=_topic("Induction heads"),
        check=lambda answer: _q3(answer),
    ),
    Question(
        key="q4",
        prompt=_PROMPTS["q4"],
        topic=_topic("Scores, softmax and masks"),
        check=lambda answer: _q4(answer),
    ),
    Question(
        key="q5",
        prompt=_PROMPTS["q5"],
        topic=_topic("Projections, heads and parameters"),
        check=lambda answer: _q5(answer),
    ),
    Question(
        key="q6",
        prompt=_PROMPTS["q6"],
        topic=_topic("What attention costs"),
        check=lambda answer: _q6(answer),
    ),
)
