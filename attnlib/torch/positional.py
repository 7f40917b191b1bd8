"""Lesson 03: sinusoidal positional encodings ("Attention Is All You Need", section 3.5)."""

from __future__ import annotations

import torch

from attnlib._shapes import check_nonneg_int, check_positive_int


def sinusoidal_encoding(
    T: int,
    d_model: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Sinusoidal positional encoding, sines and cosines interleaved.

    ``PE[p, 2i] = sin(p / 10000^(2i / d_model))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i /
    d_model))``. An odd ``d_model`` is allowed: its last column is a sine.

    Args:
      T: number of positions (non-negative int).
      d_model: number of features (positive int).
      dtype: floating-point dtype of the result (computed in float64, then cast).
      device: where to create the result (default: torch's default device).

    Returns:
      ``(T, d_model)`` tensor.
    """
    T = check_nonneg_int("T", T)
    d_model = check_positive_int("d_model", d_model)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    position = torch.arange(T, dtype=torch.float64, device=device).unsqueeze(-1)  # (T, 1)
    column = torch.arange(d_model, device=device)  # (d_model,)
    even = column - column % 2  # (d_model,): 2i for both columns 2i and 2i+1
    rate = torch.pow(10000.0, -even.to(torch.float64) / d_model)  # (d_model,)
    angle = position * rate  # (T, d_model)
    pe = torch.where(column % 2 == 0, torch.sin(angle), torch.cos(angle))  # (T, d_model)
    return pe.to(dtype)
