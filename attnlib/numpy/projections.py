"""Self- and cross-attention: queries, keys and values projected from inputs."""

from __future__ import annotations

import numpy as np

from .._shapes import check_weight, fmt, require_ndim
from ._validate import as_float
from .attention import attention


def _check_projections(W_q, W_k, W_v, d_q: int, d_kv: int, q_src: str, kv_src: str) -> None:
    check_weight("W_q", W_q.shape, d_q, f"(d_{q_src}, d_k) for {q_src}")
    check_weight("W_k", W_k.shape, d_kv, f"(d_{kv_src}, d_k) for {kv_src}")
    check_weight("W_v", W_v.shape, d_kv, f"(d_{kv_src}, d_v) for {kv_src}")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)} and W_k {fmt(W_k.shape)} disagree on d_k "
            f"({W_q.shape[1]} vs {W_k.shape[1]}); queries and keys must share a width"
        )


def self_attention(X, W_q, W_k, W_v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Self-attention: every position of ``X`` queries every position of ``X``.

    Args:
      X: inputs ``(..., T, d_model)``.
      W_q: ``(d_model, d_k)``; W_k: ``(d_model, d_k)``; W_v: ``(d_model, d_v)``.
      mask: boolean, True = may attend, broadcastable to ``(..., T, T)``
        (e.g. :func:`causal_mask` for a decoder).

    Returns:
      ``(output (..., T, d_v), weights (..., T, T))``.
    """
    X = as_float("X", X)
    W_q, W_k, W_v = as_float("W_q", W_q), as_float("W_k", W_k), as_float("W_v", W_v)
    require_ndim("X", X.shape, 2, "(..., T, d_model)")
    _check_projections(W_q, W_k, W_v, X.shape[-1], X.shape[-1], "X", "X")
    Q = X @ W_q  # (..., T, d_k)
    K = X @ W_k  # (..., T, d_k)
    V = X @ W_v  # (..., T, d_v)
    return attention(Q, K, V, mask)


def cross_attention(Y, H, W_q, W_k, W_v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Cross-attention: decoder states ``Y`` query encoder states ``H``.

    Args:
      Y: decoder inputs ``(..., m, d_y)`` — the queries come from here.
      H: encoder outputs ``(..., n, d_h)`` — keys and values come from here.
      W_q: ``(d_y, d_k)``; W_k: ``(d_h, d_k)``; W_v: ``(d_h, d_v)``.
      mask: boolean, True = may attend, broadcastable to ``(..., m, n)``
        (typically the encoder's padding mask ``(B, 1, n)``).

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))``.
    """
    Y, H = as_float("Y", Y), as_float("H", H)
    W_q, W_k, W_v = as_float("W_q", W_q), as_float("W_k", W_k), as_float("W_v", W_v)
    require_ndim("Y", Y.shape, 2, "(..., m, d_y)")
    require_ndim("H", H.shape, 2, "(..., n, d_h)")
    _check_projections(W_q, W_k, W_v, Y.shape[-1], H.shape[-1], "Y", "H")
    Q = Y @ W_q  # (..., m, d_k)
    K = H @ W_k  # (..., n, d_k)
    V = H @ W_v  # (..., n, d_v)
    return attention(Q, K, V, mask)
