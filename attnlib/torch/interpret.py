"""Lesson 06: reading what a trained head does from its attention weights.

On a sequence whose second part repeats its first with period ``p``, an induction head attends
from query ``i`` to key ``i - p + 1``: the token that followed the earlier occurrence of the
current one, which it then copies. :func:`induction_score` measures how much each head does.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_induction

from . import _validate


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Mean attention from query ``i`` to key ``i - period + 1``, over ``i >= period``, per head.

    A perfect induction head scores 1; a head attending uniformly to the causal prefix scores
    about ``log(T / period) / (T - period)``; a previous-token head scores 0 (unless ``period``
    is 2, when the two patterns coincide).

    Args:
      weights: attention weights ``(..., h, T, T)``, floating point, of a sequence whose tokens
        repeat with ``period`` from position ``period`` on.
      period: the length of the repeated part, ``1 <= period < T``.

    Returns:
      scores ``(..., h)`` in the dtype and on the device of ``weights``; differentiable.
    """
    _validate.floating(("weights", weights))
    T, period = check_induction(tuple(weights.shape), period)
    queries = torch.arange(period, T, device=weights.device)  # (T - period,)
    keys = queries - period + 1  # (T - period,), the token after the earlier occurrence
    return weights[..., queries, keys].mean(dim=-1)  # (..., h)
