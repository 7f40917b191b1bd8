"""Boolean masks (True = may attend) and converters from other conventions.

Conventions in the wild:

* this library: boolean, ``True`` = the query may attend to the key;
* PyTorch ``key_padding_mask``: boolean ``(B, n)``, ``True`` = *ignore* the key;
* additive masks: floats added to the scores, ``0`` = keep, ``-inf`` (or a
  large negative number such as ``-1e9``) = block.
"""

from __future__ import annotations

import numpy as np

from .._shapes import check_nonneg_int, check_positive_int, fmt, require_exact_ndim
from ._validate import as_bool, as_float


def causal_mask(T: int) -> np.ndarray:
    """Causal (look-ahead) mask: query ``i`` may attend to key ``j`` iff ``j <= i``.

    Args:
      T: sequence length.

    Returns:
      boolean ``(T, T)``, lower triangle (diagonal included) True.
    """
    T = check_positive_int("T", T)
    return np.tril(np.ones((T, T), dtype=bool))  # (T, T)


def padding_mask(lengths, max_len: int) -> np.ndarray:
    """Key-padding mask for a batch of sequences padded to ``max_len``.

    Args:
      lengths: ``(B,)`` true lengths, each in ``[0, max_len]``.
      max_len: padded length ``n``.

    Returns:
      boolean ``(B, 1, max_len)``, True where key position ``< lengths[b]``;
      the middle axis broadcasts over the queries of scores ``(B, m, n)``.
      For multi-head scores ``(B, h, m, n)`` add a head axis: ``mask[:, None]``.
    """
    max_len = check_nonneg_int("max_len", max_len)
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(
            f"lengths {fmt(lengths.shape)} of dtype {lengths.dtype} must be a 1-D array of "
            "integers (B,)"
        )
    bad = (lengths < 0) | (lengths > max_len)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(
            f"lengths[{b}] = {int(lengths[b])} is outside [0, max_len] = [0, {max_len}]"
        )
    keep = np.arange(max_len) < lengths[:, None]  # (B, max_len)
    return keep[:, None, :]  # (B, 1, max_len)


def from_key_padding_mask(key_padding_mask) -> np.ndarray:
    """Convert a PyTorch ``key_padding_mask`` (True = ignore) to a keep-mask.

    Args:
      key_padding_mask: boolean ``(B, n)``, True where the key is padding.

    Returns:
      boolean ``(B, 1, n)``, True where the key may be attended to.
    """
    kpm = as_bool("key_padding_mask", key_padding_mask)
    require_exact_ndim("key_padding_mask", kpm.shape, 2, "(B, n), True = ignore")
    return ~kpm[:, None, :]  # (B, 1, n)


def to_key_padding_mask(mask) -> np.ndarray:
    """Inverse of :func:`from_key_padding_mask`.

    Args:
      mask: boolean keep-mask ``(B, 1, n)`` (the same for every query).

    Returns:
      boolean ``(B, n)``, True where the key is ignored (PyTorch's convention).
    """
    mask = as_bool("mask", mask)
    require_exact_ndim("mask", mask.shape, 3, "(B, 1, n), True = may attend")
    if mask.shape[1] != 1:
        raise ValueError(
            f"mask {fmt(mask.shape)} differs per query; a key_padding_mask can only express "
            "masks of shape (B, 1, n)"
        )
    return ~mask[:, 0, :]  # (B, n)


def from_additive_mask(additive, threshold: float = -1e4) -> np.ndarray:
    """Convert an additive mask (0 = keep, -inf or very negative = block) to booleans.

    Args:
      additive: float array of any shape, each entry ``0`` or ``<= threshold``.
      threshold: entries at or below it count as blocked (``-1e9`` and
        ``float('-inf')`` both do with the default ``-1e4``).

    Returns:
      boolean array of the same shape, True = may attend.

    Raises:
      ValueError: if some entry is neither 0 nor blocked; such a mask adds a
        bias to the scores, which no boolean mask can express.
    """
    additive = as_float("additive mask", additive)
    keep = additive == 0
    blocked = additive <= threshold
    neither = ~(keep | blocked)
    if neither.any():
        idx = tuple(int(i) for i in np.argwhere(neither)[0])
        raise ValueError(
            f"additive mask {fmt(additive.shape)} has {float(additive[idx])} at {idx}: neither 0 "
            f"(keep) nor <= {threshold} (block); it biases scores and is not a boolean mask"
        )
    return keep


def to_additive_mask(mask, dtype=np.float64) -> np.ndarray:
    """Convert a boolean keep-mask to an additive one: 0 where True, ``-inf`` where False."""
    mask = as_bool("mask", mask)
    return np.where(mask, 0.0, -np.inf).astype(dtype)
