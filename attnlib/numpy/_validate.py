"""Input conversion for the NumPy backend: arrays in, clear errors out."""

from __future__ import annotations

import numpy as np

from .._shapes import check_mask, fmt

MASK_HINT = (
    "masks are boolean, True = may attend; convert an additive 0/-inf mask with "
    "from_additive_mask and a PyTorch key_padding_mask (True = ignore) with "
    "from_key_padding_mask"
)


def as_float(name: str, x: object) -> np.ndarray:
    """Return ``x`` as a floating-point array; integers become float64.

    Booleans, complex numbers, strings and objects raise ``ValueError``.
    """
    a = np.asarray(x)
    if a.dtype.kind in "iu":
        return a.astype(np.float64)
    if a.dtype.kind != "f":
        raise ValueError(
            f"{name} {fmt(a.shape)} has dtype {a.dtype}; attention needs real floating-point "
            "numbers"
        )
    return a


def as_mask(mask: object, scores_shape: tuple[int, ...], name: str = "mask") -> np.ndarray:
    """Return ``mask`` as a boolean array that broadcasts to ``scores_shape``."""
    a = np.asarray(mask)
    if a.dtype != np.bool_:
        raise ValueError(f"{name} {fmt(a.shape)} has dtype {a.dtype}; {MASK_HINT}")
    check_mask(a.shape, scores_shape, name)
    return a


def as_bool(name: str, x: object) -> np.ndarray:
    """Return ``x`` as a boolean array, or raise naming its dtype."""
    a = np.asarray(x)
    if a.dtype != np.bool_:
        raise ValueError(f"{name} {fmt(a.shape)} has dtype {a.dtype}; expected a boolean array")
    return a
