"""Mastery check of lesson 04-multi-head.

Every checker works the right answer out (with :mod:`attnlib.numpy` where it can) and then
compares: the parameters of a multi-head layer, the shape after ``split_heads``, the width a
head's scores are scaled by, and what a reshape without a transpose does to the heads.
"""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as an
from . import Question
from .answers import as_letter, as_number, as_shape

LESSON = "04-multi-head"


def _topic(section: str) -> str:
    return f"{LESSON}, '{section}'"


# ---------------------------------------------------------------- reading answers


# ---------------------------------------------------------------- q1: parameters of the layer

Q1_D_MODEL, Q1_HEADS = 512, 8


def _q1(answer: object) -> bool:
    # W_q, W_k, W_v are (d_model, h*d_head) and W_o is (h*d_head, d_model), with
    # h*d_head = d_model: count their entries (no biases).
    d_head = Q1_D_MODEL // Q1_HEADS
    width = Q1_HEADS * d_head
    shapes = [(Q1_D_MODEL, width)] * 3 + [(width, Q1_D_MODEL)]
    expected = sum(math.prod(s) for s in shapes)
    value = as_number(answer)
    return value is not None and value == expected


# ---------------------------------------------------------------- q2: the shape after split_heads

Q2_SHAPE, Q2_HEADS = (2, 10, 512), 8


def _q2(answer: object) -> bool:
    expected = an.split_heads(np.zeros(Q2_SHAPE), Q2_HEADS).shape  # (B, h, T, d_head)
    return as_shape(answer) == expected


# ---------------------------------------------------------------- q3: what a head scales by

Q3_D_MODEL, Q3_HEADS = 512, 8


def _q3(answer: object) -> bool:
    # Each head's scores are dot products of d_head-long vectors: divide by sqrt(d_head).
    expected = Q3_D_MODEL // Q3_HEADS
    value = as_number(answer)
    return value is not None and math.isclose(value, expected, rel_tol=1e-9)


# ---------------------------------------------------------------- q4: reshape without transpose

Q4_OPTIONS = {
    "a": "nothing: a direct reshape gives the same array as reshape-then-transpose",
    "b": "NumPy raises an error, because the shapes do not fit",
    "c": "row t of a head no longer holds token t: rows are filled with slices of other tokens, "
    "so positions and heads get mixed up",
    "d": "head i gets every h-th feature column instead of the contiguous block i*d:(i+1)*d",
}


def _q4(answer: object) -> bool:
    # Work it out on a tiny X whose entries name their position and feature column: with a
    # direct reshape, does row t of head i still hold columns i*d:(i+1)*d of token t?
    B, T, h, d = 1, 3, 2, 2
    token = np.repeat(np.arange(T), h * d).reshape(B, T, h * d)  # (B, T, h*d), entry = t
    column = np.tile(np.arange(h * d), (B, T, 1))  # (B, T, h*d), entry = feature column
    wrong_token = token.reshape(B, h, T, d)  # (B, h, T, d), no transpose
    wrong_column = column.reshape(B, h, T, d)  # (B, h, T, d)
    rows_are_tokens = all((wrong_token[:, i, t] == t).all() for i in range(h) for t in range(T))
    heads_are_blocks = all((wrong_column[:, i, :] // d == i).all() for i in range(h))
    if rows_are_tokens and heads_are_blocks:
        expected = "a"
    elif not rows_are_tokens:
        expected = "c"
    else:
        expected = "d"
    return as_letter(answer, "".join(Q4_OPTIONS)) == expected


QUESTIONS = (
    Question(
        key="q1",
        prompt=f"How many parameters do W_q, W_k, W_v and W_o hold together for d_model = "
        f"{Q1_D_MODEL} and {Q1_HEADS} heads, without biases?",
        topic=_topic("Counting parameters"),
        check=_q1,
    ),
    Question(
        key="q2",
        prompt=f"What is the shape of split_heads(X, {Q2_HEADS}) for X of shape {Q2_SHAPE}?",
        topic=_topic("Splitting into heads"),
        check=_q2,
    ),
    Question(
        key="q3",
        prompt=f"With d_model = {Q3_D_MODEL} and {Q3_HEADS} heads, each head divides its scores "
        "by sqrt(x). What is x?",
        topic=_topic("Multi-head attention, step by step"),
        check=_q3,
    ),
    Question(
        key="q4",
        prompt="What goes wrong when heads are split with X.reshape(B, h, T, d_head), without "
        "a transpose? " + "; ".join(f"({k}) {v}" for k, v in Q4_OPTIONS.items()),
        topic=_topic("Splitting into heads"),
        check=_q4,
    ),
)
