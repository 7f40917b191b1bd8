"""Checks shared by every exercise that returns attention weights ``(..., m, n)``.

Rows must be distributions over the keys, masked keys must get exactly zero, and the classic
masking mistakes (ignored, inverted or late masks, the -1e9 trick, the wrong axis) are
recognised whatever the exercise computes its scores from.
"""

from __future__ import annotations

import numpy as np

from .. import numpy as ref
from ._core import Mistake, Probe, where

AXIS = "02-softmax-masking, 'Which axis? Keys, not queries'"


def plain_softmax(x, axis=-1):
    """Softmax without any care for -inf rows (what a first attempt writes)."""
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def mask_of(probe: Probe, shape) -> np.ndarray:
    mask = probe.kwargs.get("mask")
    if mask is None:
        return np.ones(shape, dtype=bool)
    return np.broadcast_to(mask, shape)


def masked_weight_is_zero(probe: Probe, weights: np.ndarray) -> str | None:
    mask = mask_of(probe, weights.shape)
    leaked = np.where(mask, 0.0, np.abs(np.nan_to_num(weights, nan=1.0)))
    if leaked.max(initial=0.0) > 0:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(leaked), leaked.shape))
        return f"masked key receives weight {weights[idx]:.2g} at {where(idx, 'bhij')}"
    return None


def rows_are_distributions(probe: Probe, weights: np.ndarray) -> str | None:
    mask = mask_of(probe, weights.shape)
    has_key = mask.any(axis=-1)
    if np.isnan(weights).any():
        idx = tuple(int(i) for i in np.argwhere(np.isnan(weights))[0])
        if not has_key[idx[:-1]]:
            return (
                f"a fully masked row gives NaN at {where(idx[:-1], 'bhi')}: a query with no "
                "allowed key must get all-zero weights"
            )
        return f"weights contain NaN at {where(idx, 'bhij')}"
    rows = weights.sum(axis=-1)
    if (
        weights.ndim >= 2
        and np.allclose(weights.sum(axis=-2), 1.0)
        and not np.allclose(rows[has_key], 1.0)
    ):
        return "weights sum to one over queries (axis -2), not over keys (the last axis)", AXIS
    bad = has_key & ~np.isclose(rows, 1.0, rtol=1e-6, atol=1e-8)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"the weights of query {where(idx, 'bhi')} sum to {rows[idx]:.4g}, not 1"
    empty = ~has_key & (np.abs(rows) > 1e-12)
    if empty.any():
        idx = tuple(int(i) for i in np.argwhere(empty)[0])
        return (
            f"query {where(idx, 'bhi')} has no allowed key but its weights sum to {rows[idx]:.4g}; "
            "a fully masked row must be all zeros"
        )
    return None


def weights_invariants(position: int):
    return (
        lambda probe, out: rows_are_distributions(probe, out[position]),
        lambda probe, out: masked_weight_is_zero(probe, out[position]),
    )


def masking_mistakes(scores_of, finish):
    """Classic masking bugs, for any exercise whose weights come from ``scores_of(*args)``.

    ``finish(args, weights)`` turns buggy weights into that exercise's return value.
    """

    def variant(weights_of):
        def returns(*args, mask=None):
            scores = scores_of(*args)
            keep = np.ones(scores.shape, dtype=bool) if mask is None else mask
            return finish(args, weights_of(scores, np.broadcast_to(keep, scores.shape)))

        return returns

    with_mask = lambda p: p.kwargs.get("mask") is not None  # noqa: E731
    return (
        Mistake(
            "the mask is ignored: masked keys must get weight 0",
            variant(lambda s, m: ref.softmax(s)),
            applies=with_mask,
        ),
        Mistake(
            "the mask is inverted: True means 'may attend', so keep the scores where mask is True",
            variant(lambda s, m: ref.masked_softmax(s, ~m)),
            applies=with_mask,
        ),
        Mistake(
            "the mask is applied after softmax: masked keys are zeroed but the rows no longer "
            "sum to 1; mask the scores before normalising",
            variant(lambda s, m: ref.softmax(s) * m),
            applies=with_mask,
        ),
        Mistake(
            "a fully masked row gets uniform weights 1/n (the −1e9 trick); a query with no "
            "allowed key must get all-zero weights",
            variant(lambda s, m: ref.softmax(np.where(m, s, -1e9))),
            applies=with_mask,
        ),
        Mistake(
            "weights sum to one over queries (axis -2), not over keys (the last axis)",
            variant(lambda s, m: np.nan_to_num(plain_softmax(np.where(m, s, -np.inf), -2))),
            read=AXIS,
        ),
    )
