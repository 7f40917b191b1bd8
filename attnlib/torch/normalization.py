"""Lesson 02: turning scores into attention weights with a (masked) softmax.

Both functions subtract the row maximum before exponentiating, accumulate 16-bit inputs in
float32 and return the input dtype, so logits of ±1e4 stay finite even in float16. A row with no
allowed entry becomes all zeros, and its gradient is zero rather than NaN.
"""

from __future__ import annotations

import math

import torch

from attnlib._shapes import fmt

from . import _validate


def _softmax(
    x: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Stable masked softmax along ``dim`` without validation; see :func:`masked_softmax`."""
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if x.shape[dim] == 0:
        return x.to(out_dtype).clone()
    z = x.to(_validate.compute_dtype(x.dtype))
    if temperature != 1.0:
        z = z / temperature
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    # The shift only keeps exp() in range; softmax does not depend on it, so no gradient flows.
    shift = z.amax(dim=dim, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(z - shift)  # masked entries: exp(-inf) = 0
    total = e.sum(dim=dim, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))  # empty rows stay 0
    return weights.to(out_dtype)


def softmax(x: torch.Tensor, axis: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Numerically stable softmax of ``x / temperature`` along ``axis``.

    Args:
      x: floating-point tensor of any shape ``(...)`` with at least one axis.
      axis: the axis to normalise over (any axis, negative counts from the end).
      temperature: positive number; below 1 sharpens, above 1 flattens the distribution.

    Returns:
      a tensor of the shape and dtype of ``x`` whose slices along ``axis`` sum to one.
    """
    _validate.floating(("x", x))
    if x.ndim == 0:
        raise ValueError("x () is a scalar; softmax needs at least one axis")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis!r} is out of range for x {fmt(x.shape)} ({x.ndim} axes)")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not (temperature > 0 and math.isfinite(temperature))
    ):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return _softmax(x, dim=axis, temperature=float(temperature))


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over keys (the last axis) with disallowed keys removed before normalising.

    Args:
      scores: ``(..., m, n)`` floating point.
      mask: optional boolean ``(..., m, n)`` or anything that broadcasts to the scores without
        growing them (``(m, n)``, ``(..., 1, n)``); True = may attend.

    Returns:
      weights ``(..., m, n)`` in the dtype of ``scores``: masked keys get exactly 0, every row
      with at least one allowed key sums to one, a row with none is all zeros.
    """
    _validate.floating(("scores", scores))
    if scores.ndim == 0:
        raise ValueError("scores () is a scalar; expected (..., m, n)")
    mask = _validate.mask(mask, tuple(scores.shape), ("scores", scores))
    return _softmax(scores, dim=-1, mask=mask)  # (..., m, n)
