"""Score functions: how well each query matches each key.

All of them map queries ``(..., m, d)`` and keys ``(..., n, d)`` to a score
matrix ``(..., m, n)``; row ``i`` scores query ``i`` against every key.
"""

from __future__ import annotations

import math

import numpy as np

from .._shapes import broadcast_batch, check_qk, check_weight, fmt, require_ndim
from ._validate import as_float


def dot_scores(Q, K) -> np.ndarray:
    """Raw dot-product scores ``Q Kᵀ``.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``; leading axes broadcast against ``Q``'s.

    Returns:
      scores ``(..., m, n)`` with ``scores[..., i, j] = Q[..., i, :] · K[..., j, :]``.
    """
    Q, K = as_float("Q", Q), as_float("K", K)
    check_qk(Q.shape, K.shape)
    return Q @ np.swapaxes(K, -1, -2)  # (..., m, n)


def scaled_dot_scores(Q, K) -> np.ndarray:
    """Scaled dot-product scores ``Q Kᵀ / sqrt(d_k)`` (Vaswani et al., 2017).

    Dividing by ``sqrt(d_k)`` keeps the scores' variance near 1 whatever the
    width, so the softmax does not saturate as ``d_k`` grows.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.

    Returns:
      scores ``(..., m, n)``, in the inputs' floating dtype.
    """
    Q, K = as_float("Q", Q), as_float("K", K)
    check_qk(Q.shape, K.shape)
    d_k = Q.shape[-1]
    # math.sqrt keeps float32 float32 (np.sqrt would return a float64 scalar).
    return (Q @ np.swapaxes(K, -1, -2)) / math.sqrt(d_k)  # (..., m, n)


def additive_scores(Q, K, W_q, W_k, v) -> np.ndarray:
    """Additive (Bahdanau) scores ``v · tanh(q W_q + k W_k)`` for every query–key pair.

    Queries and keys may have different widths: both are projected into a
    shared hidden space of size ``h`` first.

    Args:
      Q: queries ``(..., m, d_q)``.
      K: keys ``(..., n, d_k)``.
      W_q: query projection ``(d_q, h)``.
      W_k: key projection ``(d_k, h)``.
      v: scoring vector ``(h,)``.

    Returns:
      scores ``(..., m, n)``.
    """
    Q, K = as_float("Q", Q), as_float("K", K)
    W_q, W_k, v = as_float("W_q", W_q), as_float("W_k", W_k), as_float("v", v)
    require_ndim("Q", Q.shape, 2, "(..., m, d_q)")
    require_ndim("K", K.shape, 2, "(..., n, d_k)")
    broadcast_batch(("Q", Q.shape), ("K", K.shape))
    check_weight("W_q", W_q.shape, Q.shape[-1], "(d_q, h) for Q (..., m, d_q)")
    check_weight("W_k", W_k.shape, K.shape[-1], "(d_k, h) for K (..., n, d_k)")
    if v.ndim != 1 or W_q.shape[1] != W_k.shape[1] or v.shape[0] != W_q.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)}, W_k {fmt(W_k.shape)} and v {fmt(v.shape)} must share the "
            "hidden size h: expected W_q (d_q, h), W_k (d_k, h), v (h,)"
        )
    q = Q @ W_q  # (..., m, h)
    k = K @ W_k  # (..., n, h)
    hidden = np.tanh(q[..., :, None, :] + k[..., None, :, :])  # (..., m, n, h)
    return hidden @ v  # (..., m, n)


def cosine_scores(Q, K, eps: float = 1e-8) -> np.ndarray:
    """Cosine similarity of every query–key pair, in ``[-1, 1]``.

    Scale-invariant: multiplying a query or key by a positive number leaves
    its scores unchanged. A zero vector scores 0 against everything (not NaN).

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      eps: norms below ``eps`` are treated as ``eps``.

    Returns:
      scores ``(..., m, n)``.
    """
    Q, K = as_float("Q", Q), as_float("K", K)
    check_qk(Q.shape, K.shape)
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps!r}")
    q_norm = np.maximum(np.linalg.norm(Q, axis=-1, keepdims=True), eps)  # (..., m, 1)
    k_norm = np.maximum(np.linalg.norm(K, axis=-1, keepdims=True), eps)  # (..., n, 1)
    return (Q / q_norm) @ np.swapaxes(K / k_norm, -1, -2)  # (..., m, n)
