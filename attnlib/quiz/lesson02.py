"""Mastery check of lesson 02-softmax-masking.

Every checker computes the right answer with :mod:`attnlib.numpy` and then
compares it with the learner's, accepting every reasonable way of writing it
(a tuple or a list for a shape, a set or a list of indices, an int or a float,
upper- or lower-case letters). Anything else, however odd, is simply wrong:
the checkers never raise (and :meth:`Question.accepts` would catch it if they did).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import numpy as an
from . import Question
from .answers import as_int, as_letter, as_number, as_shape, items

LESSON = "02-softmax-masking"


# --- reading answers ---------------------------------------------------------------------------


def _topic(section: str) -> str:
    """Where to reread, written like the checks' ``read=`` strings."""
    return f"{LESSON}, '{section}'"


# --- q1: the shapes of S, A and O ---------------------------------------------------------------

Q1_SHAPES = {"Q": (5, 16), "K": (7, 16), "V": (7, 32)}


def _q1_expected() -> tuple[tuple[int, ...], ...]:
    Q, K, V = (np.zeros(s) for s in Q1_SHAPES.values())
    scores = an.scaled_dot_scores(Q, K)  # (m, n)
    output, weights = an.attention(Q, K, V)  # (m, d_v), (m, n)
    return scores.shape, weights.shape, output.shape


def _q1(answer: object) -> bool:
    if isinstance(answer, Mapping):  # {"S": (5, 7), "A": (5, 7), "O": (5, 32)}
        by_name = {str(k).strip().upper(): v for k, v in answer.items()}
        if set(by_name) != {"S", "A", "O"}:
            return False
        answer = [by_name["S"], by_name["A"], by_name["O"]]
    if not isinstance(answer, list | tuple) or len(answer) != 3:
        return False
    return tuple(as_shape(a) for a in answer) == _q1_expected()


# --- q2: the keys query 2 may see under the causal mask of length 4 -----------------------------


def _q2(answer: object) -> bool:
    row = an.causal_mask(4)[2]  # (4,) what query 2 may attend to
    elements = items(answer)
    if not elements:
        return False
    if all(isinstance(i, bool | np.bool_) for i in elements):  # the mask row itself
        return len(elements) == len(row) and [bool(i) for i in elements] == row.tolist()
    if not all((as_int(i) is not None and not isinstance(i, float)) for i in elements):
        return False
    return {int(i) for i in elements} == {int(j) for j in np.flatnonzero(row)}


# --- q3 and q4: the softmax axis of cross-attention scores (B, h, 6, 10) ------------------------

Q3_SCORES_SHAPE = (2, 3, 6, 10)  # (B, h, L_tgt, L_src)


def _q3(answer: object) -> bool:
    axis = as_number(answer)
    if axis is None or not axis.is_integer():
        return False
    weights = an.masked_softmax(np.zeros(Q3_SCORES_SHAPE))  # (B, h, 6, 10)
    ndim = len(Q3_SCORES_SHAPE)
    right = {ax for ax in range(-ndim, ndim) if np.allclose(weights.sum(axis=ax), 1.0)}
    return int(axis) in right


def _over(axis: int):
    return lambda scores: an.softmax(scores, axis=axis)


def _raises(scores: np.ndarray) -> np.ndarray:
    raise ValueError("a shape error")


# What each option of q4 claims softmax over the length-6 axis computes.
Q4_OPTIONS = {
    "a": _over(-1),  # for each target query, a distribution over the 10 source positions
    "b": _over(-2),  # for each source position, a distribution over the 6 target queries
    "c": _over(1),  # for each query-key pair, a distribution over the heads
    "d": _raises,  # nothing: a shape error, since 6 != 10
}


def _q4_expected() -> str:
    scores = np.random.default_rng(0).standard_normal(Q3_SCORES_SHAPE)  # (B, h, 6, 10)
    wrong = an.softmax(scores, axis=Q3_SCORES_SHAPE.index(6))  # the length-6 axis
    for letter, computes in Q4_OPTIONS.items():
        try:
            if np.allclose(computes(scores), wrong):
                return letter
        except ValueError:
            continue
    raise AssertionError("no option of q4 describes softmax over the length-6 axis")


def _q4(answer: object) -> bool:
    return as_letter(answer, "".join(Q4_OPTIONS)) == _q4_expected()


# --- q5: a fully masked row -----------------------------------------------------------------------


def _q5(answer: object) -> bool:
    scores = np.array([[0.5, -1.0, 2.0, 0.0]])  # (1, 4) one query, four keys
    expected = an.masked_softmax(scores, np.zeros((1, 4), dtype=bool))[0]  # (4,)
    elements = items(answer)
    if elements is None or len(elements) != len(expected):
        return False
    got = [as_number(i) for i in elements]
    if any(g is None for g in got):  # NaN, inf, bools and strings are no weights
        return False
    return bool(np.allclose(got, expected, rtol=0, atol=1e-9))


# --- q6: a masked softmax by hand ---------------------------------------------------------------

Q6_ROW = np.array([1.0, 1.0, 1.0, 5.0])  # scaled scores of query 2, keys 0..3


def _q6(answer: object) -> bool:
    value = as_number(answer)
    if value is None:
        return False
    weights = an.masked_softmax(Q6_ROW, an.causal_mask(4)[2])  # (4,)
    return bool(abs(value - weights[0]) <= 5e-3)


QUESTIONS = (
    Question(
        key="q1",
        prompt=(
            "Q (5, 16), K (7, 16), V (7, 32), one head, no batch: the shapes of the scores S, "
            "the weights A and the output O, as (S, A, O)"
        ),
        topic=_topic("Scaled dot-product attention"),
        check=_q1,
    ),
    Question(
        key="q2",
        prompt="causal mask of length L = 4: the key positions query 2 (0-indexed) may attend to",
        topic=_topic("The causal mask"),
        check=_q2,
    ),
    Question(
        key="q3",
        prompt="cross-attention scores (B, h, 6, 10): the axis softmax must normalise over",
        topic=_topic("Which axis? Keys, not queries"),
        check=_q3,
    ),
    Question(
        key="q4",
        prompt="what softmax over the length-6 axis of those scores computes (a, b, c or d)",
        topic=_topic("Which axis? Keys, not queries"),
        check=_q4,
    ),
    Question(
        key="q5",
        prompt="the four weights of a query whose four keys are all masked",
        topic=_topic("−1e9 or −inf: rows with nothing to attend to"),
        check=_q5,
    ),
    Question(
        key="q6",
        prompt="scaled scores [1, 1, 1, 5] of query 2 under a causal mask: the weight on key 0",
        topic=_topic("Masking before the softmax"),
        check=_q6,
    ),
)
