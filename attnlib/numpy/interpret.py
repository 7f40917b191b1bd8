"""Reading what a trained head does from its attention weights.

An *induction head* completes patterns: having seen ``… A B … A``, it attends from the second
``A`` to the token after the first one, ``B``, and copies it. On a sequence whose second part
repeats its first with period ``p`` (token ``i`` equals token ``i - p``), query ``i`` of such a
head puts its weight on key ``i - p + 1``. The induction score measures how much it does.
"""

from __future__ import annotations

import numpy as np

from .._shapes import check_induction
from ._validate import as_float


def induction_score(weights, period: int) -> np.ndarray:
    """Mean attention from query ``i`` to key ``i - period + 1``, over ``i >= period``, per head.

    A perfect induction head scores 1; a head attending uniformly to the causal prefix scores
    about ``log(T / period) / (T - period)``; a head that looks at the previous token scores 0
    (unless ``period`` is 2, when the two patterns coincide).

    Args:
      weights: attention weights ``(..., h, T, T)`` of a sequence whose tokens repeat with
        ``period`` from position ``period`` on.
      period: the length of the repeated part, ``1 <= period < T``.

    Returns:
      scores ``(..., h)``, one per head.
    """
    weights = as_float("weights", weights)
    T, period = check_induction(weights.shape, period)
    queries = np.arange(period, T)  # (T - period,)
    keys = queries - period + 1  # (T - period,), the token after the earlier occurrence
    return weights[..., queries, keys].mean(axis=-1)  # (..., h)
