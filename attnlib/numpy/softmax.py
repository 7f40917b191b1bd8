"""Numerically stable softmax, with and without a mask."""

from __future__ import annotations

import math

import numpy as np

from ._validate import as_float, as_mask


def _normalise(x: np.ndarray, axis: int) -> np.ndarray:
    """Stable softmax along ``axis``; slices that are all ``-inf`` become zeros, and an axis of
    length 0 (no keys at all) gives an empty result, as PyTorch's softmax does."""
    if x.shape[axis] == 0:
        return np.zeros_like(x)
    peak = np.max(x, axis=axis, keepdims=True)
    # Subtracting the maximum changes nothing mathematically (it cancels in the
    # ratio) but keeps exp() from overflowing. An all -inf slice has no maximum
    # worth subtracting: use 0 so exp(-inf - 0) = 0 without a warning.
    peak = np.where(np.isfinite(peak), peak, 0)
    e = np.exp(x - peak)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def softmax(x, axis: int = -1, temperature: float = 1.0) -> np.ndarray:
    """Softmax of ``x / temperature`` along ``axis``.

    Stable for any input size: the maximum is subtracted before ``exp``. A
    slice that is entirely ``-inf`` gives zeros rather than NaN.

    Args:
      x: array of any shape ``(...)``.
      axis: the axis to normalise over (default the last).
      temperature: > 0. Below 1 sharpens towards the argmax, above 1 flattens
        towards uniform.

    Returns:
      an array of ``x``'s shape whose slices along ``axis`` sum to 1.
    """
    x = as_float("x", x)
    if x.ndim == 0:
        raise ValueError("x () is a scalar; softmax needs at least one axis")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for x {x.shape} ({x.ndim} axes)")
    if not (isinstance(temperature, int | float) and math.isfinite(temperature)) or (
        temperature <= 0
    ):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    if temperature != 1:
        x = x / float(temperature)
    return _normalise(x, axis)


def masked_softmax(scores, mask=None) -> np.ndarray:
    """Softmax over keys (the last axis) that gives masked keys exactly zero weight.

    The mask is applied *before* normalising, so the allowed weights of each
    row still sum to 1. A row with no allowed key gets all-zero weights.

    Args:
      scores: ``(..., m, n)``.
      mask: boolean, True = may attend, broadcastable to ``(..., m, n)``;
        ``None`` allows every key.

    Returns:
      weights ``(..., m, n)``.
    """
    scores = as_float("scores", scores)
    if scores.ndim < 1:
        raise ValueError("scores () is a scalar; expected (..., m, n)")
    if mask is None:
        return _normalise(scores, -1)
    mask = as_mask(mask, scores.shape)
    blocked = np.where(mask, scores, -np.inf)  # (..., m, n)
    return _normalise(blocked, -1)
