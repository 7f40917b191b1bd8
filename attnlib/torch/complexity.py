"""Lesson 05: what attention costs, counted and measured.

Plain-number helpers (no tensors needed) for the operation count and the memory of the score
matrix, and :func:`fit_exponent` to read the growth exponent off measured run times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnlib._shapes import check_nonneg_int, fmt


def attention_flops(m: int, n: int, d_k: int, d_v: int) -> int:
    """Floating-point operations of the two products of attention, ``2·m·n·d_k + 2·m·n·d_v``.

    ``Q Kᵀ`` takes ``m·n`` dot products of length ``d_k`` (a multiply and an add each), and the
    weighted sum ``W V`` takes ``m·d_v`` dot products of length ``n``.

    Args:
      m: number of queries (non-negative int).
      n: number of keys.
      d_k: query/key width.
      d_v: value width.

    Returns:
      the count as a Python int.
    """
    m = check_nonneg_int("m", m)
    n = check_nonneg_int("n", n)
    d_k = check_nonneg_int("d_k", d_k)
    d_v = check_nonneg_int("d_v", d_v)
    return 2 * m * n * d_k + 2 * m * n * d_v


def score_matrix_bytes(batch: int, heads: int, m: int, n: int, itemsize: int | torch.dtype) -> int:
    """Bytes taken by a materialised score (or weight) matrix ``(batch, heads, m, n)``.

    Args:
      batch: batch size (non-negative int).
      heads: number of heads.
      m: number of queries.
      n: number of keys.
      itemsize: bytes per element (4 for float32, 2 for float16/bfloat16), or a ``torch.dtype``.

    Returns:
      ``batch·heads·m·n·itemsize`` as a Python int.
    """
    if isinstance(itemsize, torch.dtype):
        itemsize = itemsize.itemsize
    sizes = {"batch": batch, "heads": heads, "m": m, "n": n, "itemsize": itemsize}
    return math.prod(check_nonneg_int(name, value) for name, value in sizes.items())


def _as_vector(values: object) -> torch.Tensor:
    """``values`` (list, array or tensor on any device) as a float64 CPU tensor."""
    if isinstance(values, torch.Tensor):
        return values.detach().to(device="cpu", dtype=torch.float64)
    try:
        return torch.as_tensor(values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"expected a 1-D sequence of numbers, got {values!r} ({err})") from None


def fit_exponent(
    ns: Sequence[float] | torch.Tensor, times: Sequence[float] | torch.Tensor
) -> float:
    """Growth exponent ``p`` in ``time ≈ c · n^p``: the least-squares slope of ``log(times)`` on
    ``log(ns)``.

    Args:
      ns: ``(k,)`` problem sizes, positive, at least two distinct; a list, NumPy array or tensor.
      times: ``(k,)`` measurements (seconds, bytes, ...), positive, one per size.

    Returns:
      the slope as a Python float (about 2 for naive attention's time in the sequence length).
    """
    x, y = _as_vector(ns), _as_vector(times)  # (k,), (k,)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(
            f"ns {fmt(x.shape)} and times {fmt(y.shape)} must be 1-D arrays of the same length"
        )
    if (x <= 0).any() or (y <= 0).any() or not torch.isfinite(x).all():
        raise ValueError("ns and times must be positive: a log-log fit needs log(n) and log(t)")
    if not torch.isfinite(y).all():
        raise ValueError("times must be finite")
    if torch.unique(x).numel() < 2:
        raise ValueError(f"ns {x.tolist()} needs at least two distinct sizes to fit a slope")
    x, y = x.log(), y.log()
    x_c = x - x.mean()  # (k,)
    return float((x_c * (y - y.mean())).sum() / (x_c * x_c).sum())
