"""Exact attention in key blocks with an online softmax (the idea behind FlashAttention).

Naive attention holds the whole ``(..., m, n)`` score matrix. Here the keys
are visited ``block_size`` at a time while three running quantities are kept
per query row:

* ``peak``  — the largest score seen so far ``(..., m, 1)``;
* ``total`` — the softmax denominator so far, relative to ``peak`` ``(..., m, 1)``;
* ``acc``   — the weighted sum of values so far, relative to ``peak`` ``(..., m, d_v)``.

When a block raises the peak, the old ``total`` and ``acc`` are rescaled by
``exp(old_peak - new_peak)``; after the last block ``acc / total`` is exactly
``softmax(scores) @ V``.
"""

from __future__ import annotations

import math

import numpy as np

from .._shapes import check_positive_int, check_qkv
from ._validate import as_float

DEFAULT_BLOCK_SIZE = 256


def chunked_attention(
    Q, K, V, block_size: int = DEFAULT_BLOCK_SIZE, causal: bool = False
) -> np.ndarray:
    """Scaled dot-product attention computed over key blocks, in ``O(m·block_size)`` memory.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``.
      block_size: keys per block; at most ``(..., m, block_size)`` scores exist at once.
      causal: if True, query ``i`` attends to keys ``j <= i`` only (as
        :func:`causal_mask`); key blocks entirely in the future are skipped.

    Returns:
      output ``(..., m, d_v)``, equal to ``attention(Q, K, V, mask)[0]``.
    """
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    _, out_shape = check_qkv(Q.shape, K.shape, V.shape)
    block_size = check_positive_int("block_size", block_size)
    dtype = np.result_type(Q, K, V)
    m, n = Q.shape[-2], K.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])  # a Python float keeps float32 float32
    Qs = (Q * scale).astype(dtype, copy=False)  # (..., m, d_k), scaled once

    peak = np.full(out_shape[:-1] + (1,), -np.inf, dtype=dtype)  # (..., m, 1)
    total = np.zeros(out_shape[:-1] + (1,), dtype=dtype)  # (..., m, 1)
    acc = np.zeros(out_shape, dtype=dtype)  # (..., m, d_v)
    rows = np.arange(m)[:, None]  # (m, 1)

    stop_at = min(n, m) if causal else n  # keys j >= m are in every query's future
    for start in range(0, stop_at, block_size):
        stop = min(start + block_size, n)
        Kb, Vb = K[..., start:stop, :], V[..., start:stop, :]  # (..., b, d_k), (..., b, d_v)
        s = Qs @ np.swapaxes(Kb, -1, -2)  # (..., m, b)
        if causal and stop - 1 > 0:
            s = np.where(np.arange(start, stop) <= rows, s, -np.inf)  # (..., m, b)
        new_peak = np.maximum(peak, s.max(axis=-1, keepdims=True))  # (..., m, 1)
        safe = np.where(np.isfinite(new_peak), new_peak, 0)  # rows with nothing yet
        np.exp(s - safe, out=s)  # (..., m, b) probabilities relative to new_peak
        rescale = np.exp(peak - safe)  # (..., m, 1); exp(-inf) = 0 on the first block
        total = total * rescale + s.sum(axis=-1, keepdims=True)
        acc = acc * rescale + s @ Vb  # (..., m, d_v)
        peak = new_peak
    return np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)  # (..., m, d_v)
