"""Lesson 03: self- and cross-attention, with queries, keys and values projected from inputs.

Projections multiply on the right: ``Q = X @ W_q`` with ``W_q`` of shape ``(d_model, d_k)``.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_weight, fmt, require_ndim

from . import _validate
from .dot_product import attention


def _check_projections(
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    d_q: int,
    d_kv: int,
    q_src: str,
    kv_src: str,
) -> None:
    """Validate ``(..., d_q) @ W_q (d_q, d_k)``, ``(..., d_kv) @ W_k`` and ``@ W_v``."""
    check_weight("W_q", tuple(W_q.shape), d_q, f"(d_{q_src}, d_k) for {q_src}")
    check_weight("W_k", tuple(W_k.shape), d_kv, f"(d_{kv_src}, d_k) for {kv_src}")
    check_weight("W_v", tuple(W_v.shape), d_kv, f"(d_{kv_src}, d_v) for {kv_src}")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)} and W_k {fmt(W_k.shape)} disagree on d_k "
            f"({W_q.shape[1]} vs {W_k.shape[1]}); queries and keys must share a width"
        )


def self_attention(
    X: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention: queries, keys and values all come from ``X``.

    Args:
      X: inputs ``(..., T, d_x)``.
      W_q: query projection ``(d_x, d_k)``.
      W_k: key projection ``(d_x, d_k)``.
      W_v: value projection ``(d_x, d_v)``.
      mask: optional boolean mask broadcasting to ``(..., T, T)``, True = may attend (e.g.
        ``causal_mask(T)`` for a decoder).

    Returns:
      ``(output (..., T, d_v), weights (..., T, T))``.
    """
    _validate.floating(("X", X), ("W_q", W_q), ("W_k", W_k), ("W_v", W_v))
    require_ndim("X", tuple(X.shape), 2, "(..., T, d_model)")
    _check_projections(W_q, W_k, W_v, X.shape[-1], X.shape[-1], "X", "X")
    Q = X @ W_q  # (..., T, d_k)
    K = X @ W_k  # (..., T, d_k)
    V = X @ W_v  # (..., T, d_v)
    return attention(Q, K, V, mask)


def cross_attention(
    Y: torch.Tensor,
    H: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-attention: queries from the decoder states ``Y``, keys and values from ``H``.

    Args:
      Y: decoder states ``(..., m, d_y)``.
      H: encoder states ``(..., n, d_h)``; batch axes broadcast against ``Y``'s.
      W_q: query projection ``(d_y, d_k)``.
      W_k: key projection ``(d_h, d_k)``.
      W_v: value projection ``(d_h, d_v)``.
      mask: optional boolean mask broadcasting to ``(..., m, n)``, True = may attend (e.g.
        ``padding_mask(lengths, n)`` for padded encoder outputs).

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))``.
    """
    _validate.floating(("Y", Y), ("H", H), ("W_q", W_q), ("W_k", W_k), ("W_v", W_v))
    require_ndim("Y", tuple(Y.shape), 2, "(..., m, d_y)")
    require_ndim("H", tuple(H.shape), 2, "(..., n, d_h)")
    _check_projections(W_q, W_k, W_v, Y.shape[-1], H.shape[-1], "Y", "H")
    Q = Y @ W_q  # (..., m, d_k)
    K = H @ W_k  # (..., n, d_k)
    V = H @ W_v  # (..., n, d_v)
    return attention(Q, K, V, mask)
