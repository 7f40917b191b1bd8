"""Lesson 01: score functions that compare every query with every key.

All of them return scores of shape ``(..., m, n)``: one row per query, one column per key.
"""

from __future__ import annotations

import math

import torch

from attnlib._shapes import broadcast_batch, check_qk, check_weight, fmt, require_ndim

from . import _validate


def _check_qk(Q: torch.Tensor, K: torch.Tensor) -> tuple[int, ...]:
    _validate.floating(("Q", Q), ("K", K))
    return check_qk(tuple(Q.shape), tuple(K.shape))


def _scale(d_k: int, shape: tuple[int, ...]) -> float:
    if d_k == 0:
        raise ValueError(f"Q {fmt(shape)} has d_k = 0; scaling by 1/sqrt(d_k) needs d_k >= 1")
    return 1.0 / math.sqrt(d_k)


def _scaled_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """``Q Kᵀ / sqrt(d_k)`` without validation.

    ``Q`` is scaled before the product, so 16-bit floats overflow later than they would after.
    """
    scale = _scale(Q.shape[-1], tuple(Q.shape))
    return (Q * scale) @ K.transpose(-2, -1)  # (..., m, n)


def dot_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Dot-product scores ``Q Kᵀ`` over the last two axes.

    Args:
      Q: queries ``(..., m, d_k)``, floating point.
      K: keys ``(..., n, d_k)``; batch axes broadcast against ``Q``'s.

    Returns:
      scores ``(..., m, n)`` where ``scores[..., i, j] = Q[..., i, :] · K[..., j, :]``.
    """
    _check_qk(Q, K)
    return Q @ K.transpose(-2, -1)  # (..., m, n)


def scaled_dot_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product scores ``Q Kᵀ / sqrt(d_k)``.

    Args:
      Q: queries ``(..., m, d_k)``, floating point, ``d_k >= 1``.
      K: keys ``(..., n, d_k)``; batch axes broadcast against ``Q``'s.

    Returns:
      scores ``(..., m, n)``.
    """
    _check_qk(Q, K)
    return _scaled_scores(Q, K)  # (..., m, n)


def additive_scores(
    Q: torch.Tensor,
    K: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    """Additive (Bahdanau) scores ``v · tanh(q W_q + k W_k)`` for every query/key pair.

    Args:
      Q: queries ``(..., m, d_q)``.
      K: keys ``(..., n, d_k)``; ``d_q`` and ``d_k`` may differ, batch axes broadcast.
      W_q: query projection ``(d_q, h)``.
      W_k: key projection ``(d_k, h)``.
      v: scoring vector ``(h,)``.

    Returns:
      scores ``(..., m, n)``.
    """
    _validate.floating(("Q", Q), ("K", K), ("W_q", W_q), ("W_k", W_k), ("v", v))
    require_ndim("Q", tuple(Q.shape), 2, "(..., m, d_q)")
    require_ndim("K", tuple(K.shape), 2, "(..., n, d_k)")
    broadcast_batch(("Q", tuple(Q.shape)), ("K", tuple(K.shape)))
    check_weight("W_q", tuple(W_q.shape), Q.shape[-1], "(d_q, h) for Q (..., m, d_q)")
    check_weight("W_k", tuple(W_k.shape), K.shape[-1], "(d_k, h) for K (..., n, d_k)")
    if v.ndim != 1 or W_q.shape[1] != W_k.shape[1] or v.shape[0] != W_q.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)}, W_k {fmt(W_k.shape)} and v {fmt(v.shape)} must share the "
            "hidden size h: expected W_q (d_q, h), W_k (d_k, h), v (h,)"
        )
    q = Q @ W_q  # (..., m, h)
    k = K @ W_k  # (..., n, h)
    hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (..., m, n, h)
    return hidden @ v  # (..., m, n)


def cosine_scores(Q: torch.Tensor, K: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine similarity of every query with every key.

    Each vector is divided by ``max(‖x‖, eps)``, so a zero vector scores 0 (never NaN) and the
    gradient stays finite.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``; batch axes broadcast against ``Q``'s.
      eps: positive floor for the norms.

    Returns:
      scores ``(..., m, n)`` in ``[-1, 1]``.
    """
    _check_qk(Q, K)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    q_norm = torch.linalg.vector_norm(Q, dim=-1, keepdim=True).clamp_min(eps)  # (..., m, 1)
    k_norm = torch.linalg.vector_norm(K, dim=-1, keepdim=True).clamp_min(eps)  # (..., n, 1)
    return (Q / q_norm) @ (K / k_norm).transpose(-2, -1)  # (..., m, n)
