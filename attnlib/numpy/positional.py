"""Sinusoidal positional encoding (Vaswani et al., 2017)."""

from __future__ import annotations

import numpy as np

from .._shapes import check_nonneg_int, check_positive_int


def sinusoidal_encoding(T: int, d_model: int) -> np.ndarray:
    """Sinusoidal positions, sine and cosine interleaved.

    ``PE[p, 2i] = sin(p / 10000^(2i/d_model))`` and
    ``PE[p, 2i+1] = cos(p / 10000^(2i/d_model))``. Each pair of columns turns
    at its own frequency, so ``PE[p + k]`` is a fixed rotation of ``PE[p]``.

    Args:
      T: number of positions (``0 … T-1``).
      d_model: width; an odd width ends with a sine column.

    Returns:
      float64 ``(T, d_model)``.
    """
    T = check_nonneg_int("T", T)
    d_model = check_positive_int("d_model", d_model)
    position = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    even = np.arange(0, d_model, 2, dtype=np.float64)  # (ceil(d/2),) the 2i
    angle = position / 10000.0 ** (even / d_model)  # (T, ceil(d/2))
    pe = np.empty((T, d_model))  # (T, d_model)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe
