"""Mastery check of lesson 05-complexity.

Every checker works the right answer out (with :mod:`attnlib.numpy` where it can) and then
compares: the bytes of a score matrix, what doubling the length does to the time, what the
online softmax does when a block raises the maximum, and the exponent fitted to a table.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .. import numpy as an
from . import Question
from .answers import NUMBER, as_letter, as_number

LESSON = "05-complexity"


def _topic(section: str) -> str:
    return f"{LESSON}, '{section}'"


# ---------------------------------------------------------------- reading answers


_UNITS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}  # fmt: skip


def _as_bytes(answer: object) -> list[float]:
    """The byte counts an answer may mean: a number of bytes (or of GiB), or "3 GiB"-like text."""
    if isinstance(answer, str):
        match = re.fullmatch(rf"\s*({NUMBER})\s*([a-zA-Z]*)\s*", answer.replace(",", ""))
        if not match:
            return []
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit in _UNITS:
            return [value * _UNITS[unit]]
        return [value, value * 2**30] if not unit else []
    value = as_number(answer)
    return [] if value is None else [value, value * 2**30]


# ---------------------------------------------------------------- q1: bytes of the scores

Q1 = {"batch": 1, "heads": 12, "m": 8192, "n": 8192, "itemsize": 4}  # float32


def _q1(answer: object) -> bool:
    expected = an.score_matrix_bytes(**Q1)
    # Bytes, or GiB, or any unit in a string; a value rounded to 1 % is still right.
    return any(math.isclose(v, expected, rel_tol=1e-2) for v in _as_bytes(answer))


# ---------------------------------------------------------------- q2: doubling the length

Q2_N, Q2_D = 4096, 64


def _q2(answer: object) -> bool:
    # Time follows the operation count, which is quadratic in n for m = n.
    expected = an.attention_flops(2 * Q2_N, 2 * Q2_N, Q2_D, Q2_D) / an.attention_flops(
        Q2_N, Q2_N, Q2_D, Q2_D
    )
    if isinstance(answer, str):
        text = answer.strip().lower().replace("×", "x").replace("times", "x").replace(" ", "")
        text = text.strip("x*")
        text = {"four": "4"}.get(text, text)
        if not re.fullmatch(NUMBER, text):
            return False
        value = float(text)
    else:
        value = as_number(answer)
    return value is not None and math.isclose(value, expected, rel_tol=1e-9)


# ---------------------------------------------------------------- q3: a larger maximum

Q3_OPTIONS = {
    "a": "throw away what was accumulated so far and start again from the new block",
    "b": "multiply the running sum and the running output by exp(old_max - new_max), then add "
    "the new block's terms computed against new_max",
    "c": "nothing: the maximum cancels in the final division, so it can stay as it was",
    "d": "divide the new block's exponentials by the old running sum",
}


def _q3(answer: object) -> bool:
    # Decide by running the two-block case both ways: rescaling must reproduce the softmax.
    scores, values = np.array([1.0, 2.0, 4.0, 3.0]), np.array([10.0, 20.0, 30.0, 40.0])
    exact = an.softmax(scores) @ values
    old, new = scores[:2].max(), scores.max()
    total = np.exp(scores[:2] - old).sum()
    acc = np.exp(scores[:2] - old) @ values[:2]
    p = np.exp(scores[2:] - new)
    rescaled = (acc * np.exp(old - new) + p @ values[2:]) / (total * np.exp(old - new) + p.sum())
    expected = "b" if math.isclose(rescaled, exact) else "c"
    return as_letter(answer, "".join(Q3_OPTIONS)) == expected


# ---------------------------------------------------------------- q4: fit an exponent

Q4_NS = (256, 512, 1024, 2048, 4096)
Q4_TIMES = (0.002, 0.0035, 0.011, 0.041, 0.17)  # seconds


def _q4(answer: object) -> bool:
    expected = an.fit_exponent(Q4_NS, Q4_TIMES)
    value = as_number(answer)
    return value is not None and abs(value - expected) <= 0.01  # two decimals are enough


QUESTIONS = (
    Question(
        key="q1",
        prompt="How many bytes does the float32 score matrix take for batch 1, 12 heads and "
        "n = 8192 queries and keys?",
        topic=_topic("Where the memory goes"),
        check=_q1,
    ),
    Question(
        key="q2",
        prompt="Naive self-attention on n tokens takes t seconds (n large). About how many times "
        "longer does it take on 2n tokens?",
        topic=_topic("Counting the work"),
        check=_q2,
    ),
    Question(
        key="q3",
        prompt="In the online softmax, a new key block has a larger maximum than all blocks "
        "before it. What must happen? " + "; ".join(f"({k}) {v}" for k, v in Q3_OPTIONS.items()),
        topic=_topic("Attention in blocks: the online softmax"),
        check=_q3,
    ),
    Question(
        key="q4",
        prompt=f"Fit the exponent p of time ≈ c·n^p to ns = {list(Q4_NS)}, times = "
        f"{list(Q4_TIMES)} seconds (least squares on log-log, two decimals).",
        topic=_topic("Measuring the exponent"),
        check=_q4,
    ),
)
