"""Mastery check of lesson 01-scoring.

Every checker works the right answer out (with :mod:`attnlib.numpy` where it can) and then
compares: the shape of ``Q Kᵀ``, the variance of a dot product, which score ignores a key's
length, one weight of the lesson's worked example, and the limit of a cold softmax.
"""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as an
from . import Question
from .answers import as_number, as_shape

LESSON = "01-scoring"


def _topic(section: str) -> str:
    return f"{LESSON}, '{section}'"


# ---------------------------------------------------------------- reading answers


def _choices(answer: object, options: dict[str, tuple[str, ...]]) -> set[str] | None:
    """The option letters an answer names: "d", "D", "(d)", "d)", a name, or a set/list of them.

    ``options`` maps each letter to names that also select it (e.g. ``"cosine"``).
    """
    if isinstance(answer, str):
        text = answer.strip().lower().strip("().:] ").strip()
        if text in options:
            return {text}
        for letter, names in options.items():
            if text in names:
                return {letter}
        return None
    if isinstance(answer, set | frozenset | list | tuple) and answer:
        picked: set[str] = set()
        for item in answer:
            one = _choices(item, options) if isinstance(item, str) else None
            if one is None:
                return None
            picked |= one
        return picked
    return None


# ---------------------------------------------------------------- q1: the shape of the scores

Q1_Q, Q1_K = (5, 16), (7, 16)


def _q1(answer: object) -> bool:
    expected = an.dot_scores(np.zeros(Q1_Q), np.zeros(Q1_K)).shape  # (m, n)
    return as_shape(answer) == expected


# ---------------------------------------------------------------- q2: the variance of q · k

Q2_D_K = 64


def _q2(answer: object) -> bool:
    # q · k = sum over d_k independent products q_t k_t; each has mean 0 and variance
    # E[q_t²] E[k_t²] = 1 · 1, and the variances of independent terms add up.
    var_q = var_k = 1.0
    expected = sum(var_q * var_k for _ in range(Q2_D_K))
    value = as_number(answer)
    return value is not None and math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------- q3: invariant to a key's length

Q3_OPTIONS = {
    "a": ("dot", "dot product", "dot-product", "dot_scores"),
    "b": ("scaled dot", "scaled dot product", "scaled dot-product", "scaled_dot_scores"),
    "c": ("additive", "bahdanau", "additive (bahdanau)", "additive_scores"),
    "d": ("cosine", "cosine similarity", "cosine_scores"),
}


def _invariant_scorings() -> set[str]:
    """The options whose scores do not move when every key is multiplied by 7."""
    g = np.random.default_rng(1)
    Q, K = g.standard_normal((3, 4)), g.standard_normal((5, 4))  # (m, d_k), (n, d_k)
    W_q, W_k, v = g.standard_normal((4, 6)), g.standard_normal((4, 6)), g.standard_normal(6)
    scorings = {
        "a": an.dot_scores,
        "b": an.scaled_dot_scores,
        "c": lambda Q, K: an.additive_scores(Q, K, W_q, W_k, v),
        "d": an.cosine_scores,
    }
    return {letter for letter, fn in scorings.items() if np.allclose(fn(Q, K), fn(Q, 7.0 * K))}


def _q3(answer: object) -> bool:
    return _choices(answer, Q3_OPTIONS) == _invariant_scorings()


# ---------------------------------------------------------------- q4: the worked example

Q4_Q = [1.0, 0.0]
Q4_KEYS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
Q4_KEY = 2  # counted from 1, as in the lesson: k₂ = [0, 1]


def _q4(answer: object) -> bool:
    scores = an.dot_scores(np.array([Q4_Q]), np.array(Q4_KEYS))  # (1, 3), unscaled
    expected = float(an.softmax(scores)[0, Q4_KEY - 1])  # 1 / (2e + 1)
    value = as_number(answer)
    return value is not None and abs(value - expected) <= 1e-6


# ---------------------------------------------------------------- q5: a cold softmax

Q5_OPTIONS = {
    "a": ("uniform",),
    "b": ("one-hot", "one hot", "argmax", "onehot"),
    "c": ("zero", "zeros", "all zero"),
    "d": ("unchanged", "no change"),
}


def _cold_softmax_limit() -> set[str]:
    """The option that softmax(s / τ) approaches for a tiny τ, found by computing it."""
    s = np.array([0.3, 1.2, -0.5, 0.9])  # (n,) distinct scores
    cold = an.softmax(s / 1e-4)
    candidates = {
        "a": np.full(s.shape, 1.0 / s.size),
        "b": np.eye(s.size)[np.argmax(s)],
        "c": np.zeros(s.shape),
        "d": an.softmax(s),
    }
    return {letter for letter, p in candidates.items() if np.allclose(cold, p, atol=1e-6)}


def _q5(answer: object) -> bool:
    return _choices(answer, Q5_OPTIONS) == _cold_softmax_limit()


QUESTIONS = (
    Question(
        key="q1",
        prompt="Q has shape (5, 16) and K has shape (7, 16). What is the shape of Q Kᵀ?",
        topic=_topic("Raw scores"),
        check=_q1,
    ),
    Question(
        key="q2",
        prompt=(
            "q and k have d_k = 64 independent components, each with mean 0 and variance 1. "
            "What is the variance of q · k?"
        ),
        topic=_topic("Why divide by sqrt(d_k)"),
        check=_q2,
    ),
    Question(
        key="q3",
        prompt=(
            "Which score does not change when a key k is replaced by c·k (c > 0)? "
            "(a) dot, (b) scaled dot, (c) additive, (d) cosine"
        ),
        topic=_topic("Cosine scores"),
        check=_q3,
    ),
    Question(
        key="q4",
        prompt=(
            "In the worked example (q = [1, 0], keys [1, 0], [0, 1], [1, 1], unscaled dot "
            "product), what weight does key 2, k₂ = [0, 1], get?"
        ),
        topic=_topic("A worked example by hand"),
        check=_q4,
    ),
    Question(
        key="q5",
        prompt=(
            "For distinct scores s, what does softmax(s / τ) become as τ → 0? (a) uniform, "
            "(b) one-hot on the largest score, (c) all zeros, (d) unchanged"
        ),
        topic=_topic("Temperature"),
        check=_q5,
    ),
)
