"""Checks shared by every exercise that returns attention weights ``(..., m, n)``.

Rows must be distributions over the keys, masked keys must get exactly zero, and the classic
masking mistakes (ignored, inverted or late masks, the -1e9 trick, the wrong axis) are
recognised whatever the exercise computes its scores from. Every verdict here points at the
section of lesson 02 that teaches the rule it enforces, whichever lesson the exercise is in.
"""

from __future__ import annotations

import numpy as np

from .. import numpy as ref
from ._core import Mistake, Probe, axis_names, where
from .tolerance import tolerance

# The sections the masking and softmax verdicts send learners to (all in lesson 02).
AXIS = "02-softmax-masking, 'Which axis? Keys, not queries'"
MASKING = "02-softmax-masking, 'Masking before the softmax'"
EMPTY_ROWS = "02-softmax-masking, '−1e9 or −inf: rows with nothing to attend to'"
OVERFLOW = "02-softmax-masking, 'Why it matters: `exp` overflows'"
SECTIONS = (AXIS, MASKING, EMPTY_ROWS, OVERFLOW)

FAR_HINT = (
    "exp overflows or underflows when the allowed scores are all far from zero (about ±1000): "
    "subtract each row's maximum over its allowed keys (after masking) before exp"
)


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


def _first(found: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(found)[0])


def masked_weight_is_zero(probe: Probe, weights: np.ndarray) -> tuple[str, str] | None:
    mask = mask_of(probe, weights.shape)
    leaked = np.where(mask, 0.0, np.abs(np.nan_to_num(weights, nan=1.0)))
    if leaked.max(initial=0.0) > tolerance(weights.dtype, probe.dtype).atol:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(leaked), leaked.shape))
        at = where(idx, axis_names(weights.ndim))
        return f"masked key receives weight {weights[idx]:.2g} at {at}", MASKING
    return None


def no_nan_in_empty_rows(probe: Probe, weights: np.ndarray) -> tuple[str, str] | None:
    has_key = mask_of(probe, weights.shape).any(axis=-1)
    bad = np.isnan(weights).any(axis=-1) & ~has_key
    if bad.any():
        at = where(_first(bad), axis_names(weights.ndim)[:-1])
        return (
            f"a fully masked row gives NaN at {at}: a query with no allowed key must get "
            "all-zero weights",
            EMPTY_ROWS,
        )
    return None


def no_nan(probe: Probe, weights: np.ndarray) -> str | None:
    if np.isnan(weights).any():
        return (
            f"weights contain NaN at {where(_first(np.isnan(weights)), axis_names(weights.ndim))}"
        )
    return None


def sums_over_keys(probe: Probe, weights: np.ndarray) -> tuple[str, str] | None:
    has_key = mask_of(probe, weights.shape).any(axis=-1)
    tol = tolerance(weights.dtype, probe.dtype)
    if (
        weights.ndim >= 2
        and np.allclose(weights.sum(axis=-2), 1.0, rtol=tol.rtol, atol=tol.atol)
        and not np.allclose(weights.sum(axis=-1)[has_key], 1.0, rtol=tol.rtol, atol=tol.atol)
    ):
        return "weights sum to one over queries (axis -2), not over keys (the last axis)", AXIS
    return None


def rows_sum_to_one(probe: Probe, weights: np.ndarray) -> tuple[str, str] | None:
    has_key = mask_of(probe, weights.shape).any(axis=-1)
    tol = tolerance(weights.dtype, probe.dtype)
    rows = weights.sum(axis=-1)
    bad = has_key & ~np.isclose(rows, 1.0, rtol=tol.rtol, atol=tol.atol)
    if not bad.any():
        return None
    idx = _first(bad)
    if probe.nan_hint and abs(rows[idx]) <= tol.atol:  # every allowed exp underflowed to 0
        return probe.nan_hint, probe.nan_read
    at = where(idx, axis_names(weights.ndim)[:-1])
    return f"the weights of query {at} sum to {rows[idx]:.4g}, not 1", MASKING


def empty_rows_are_zero(probe: Probe, weights: np.ndarray) -> tuple[str, str] | None:
    has_key = mask_of(probe, weights.shape).any(axis=-1)
    rows = weights.sum(axis=-1)
    empty = ~has_key & (np.abs(rows) > tolerance(weights.dtype, probe.dtype).atol)
    if empty.any():
        idx = _first(empty)
        at = where(idx, axis_names(weights.ndim)[:-1])
        return (
            f"query {at} has no allowed key but its weights sum to {rows[idx]:.4g}; "
            "a fully masked row must be all zeros",
            EMPTY_ROWS,
        )
    return None


WEIGHT_CHECKS = (
    no_nan_in_empty_rows,
    no_nan,
    sums_over_keys,
    rows_sum_to_one,
    empty_rows_are_zero,
    masked_weight_is_zero,
)


def weights_invariants(position: int):
    """The invariants above, on the output at ``position`` (the weights)."""
    return tuple(_on_output(check, position) for check in WEIGHT_CHECKS)


def _on_output(check, position: int):
    return lambda probe, out: check(probe, out[position])


def masking_mistakes(scores_of, finish, mask_of=lambda mask, shape: mask):
    """Classic masking bugs, for any exercise whose weights come from ``scores_of(*args)``.

    ``finish(args, weights)`` turns buggy weights into that exercise's return value;
    ``mask_of(mask, shape)`` makes the exercise's mask broadcast against scores of that shape.
    """

    def variant(weights_of):
        def returns(*args, mask=None):
            scores = scores_of(*args)
            keep = (
                np.ones(scores.shape, dtype=bool) if mask is None else mask_of(mask, scores.shape)
            )
            return finish(args, weights_of(scores, np.broadcast_to(keep, scores.shape)))

        return returns

    with_mask = lambda p: p.kwargs.get("mask") is not None  # noqa: E731
    return (
        Mistake(
            "the mask is ignored: masked keys must get weight 0",
            variant(lambda s, m: ref.softmax(s)),
            applies=with_mask,
            read=MASKING,
        ),
        Mistake(
            "the mask is inverted: True means 'may attend', so keep the scores where mask is True",
            variant(lambda s, m: ref.masked_softmax(s, ~m)),
            applies=with_mask,
            read=MASKING,
        ),
        Mistake(
            "the mask is applied after softmax: masked keys are zeroed but the rows no longer "
            "sum to 1; mask the scores before normalising",
            variant(lambda s, m: ref.softmax(s) * m),
            applies=with_mask,
            read=MASKING,
        ),
        Mistake(
            "masked scores are set to 0, but 0 is an ordinary score: exp(0) still gives those "
            "keys weight; set them to −inf before the softmax",
            variant(lambda s, m: ref.softmax(np.where(m, s, 0.0))),
            applies=with_mask,
            read=MASKING,
        ),
        Mistake(
            "the boolean mask is added to the scores, so it adds 1 where True and hides "
            "nothing; this course's mask is boolean, True = may attend: keep the scores where "
            "it is True and set the rest to −inf (a mask of 0 and −inf to add is PyTorch's "
            "float convention)",
            variant(lambda s, m: ref.softmax(s + m)),
            applies=with_mask,
            read=MASKING,
        ),
        Mistake(
            "a fully masked row gets uniform weights 1/n (the −1e9 trick); a query with no "
            "allowed key must get all-zero weights",
            variant(lambda s, m: ref.softmax(np.where(m, s, -1e9))),
            applies=with_mask,
            read=EMPTY_ROWS,
        ),
        Mistake(
            "weights sum to one over queries (axis -2), not over keys (the last axis)",
            variant(lambda s, m: np.nan_to_num(plain_softmax(np.where(m, s, -np.inf), -2))),
            read=AXIS,
        ),
    )
