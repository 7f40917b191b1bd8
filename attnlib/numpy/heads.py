"""Multi-head attention: h smaller attentions side by side, then mixed by W_o."""

from __future__ import annotations

import numpy as np

from .._shapes import check_heads, check_weight, fmt, require_exact_ndim, require_ndim
from ._validate import as_float, as_mask
from .attention import attention


def split_heads(X, num_heads: int) -> np.ndarray:
    """Split the feature axis into heads: ``(B, T, h*d) → (B, h, T, d)``.

    Head ``i`` gets columns ``i*d:(i+1)*d``. Any leading axes are kept, so
    ``(..., T, h*d) → (..., h, T, d)``.
    """
    X = np.asarray(X)
    require_ndim("X", X.shape, 2, "(B, T, h*d)")
    *lead, T, width = X.shape
    d = check_heads(f"X {fmt(X.shape)}", width, num_heads)
    X = X.reshape(*lead, T, num_heads, d)  # (..., T, h, d)
    return np.swapaxes(X, -2, -3)  # (..., h, T, d)


def merge_heads(X) -> np.ndarray:
    """Inverse of :func:`split_heads`: ``(B, h, T, d) → (B, T, h*d)``."""
    X = np.asarray(X)
    require_ndim("X", X.shape, 3, "(B, h, T, d)")
    *lead, h, T, d = X.shape
    X = np.swapaxes(X, -2, -3)  # (..., T, h, d)
    return X.reshape(*lead, T, h * d)  # (..., T, h*d)


def head_mask(mask, weights_shape: tuple[int, ...]) -> np.ndarray:
    """Give a mask a head axis so it broadcasts against ``(B, h, T_q, T_kv)``.

    A mask of up to 3 axes is read as ``(B, T_q, T_kv)`` (or ``(T_q, T_kv)``)
    and shared by all heads; a 4-axis mask is ``(B, h, T_q, T_kv)`` already.
    """
    mask = np.asarray(mask)
    if mask.ndim <= 3:
        mask = np.expand_dims(mask, -3)  # (..., 1, T_q, T_kv)
    return as_mask(mask, weights_shape)


def multi_head_attention(
    X_q, X_kv, W_q, W_k, W_v, W_o, num_heads: int, mask=None
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head attention with right-multiplied projections.

    Each head ``i`` attends with columns ``i*d_head:(i+1)*d_head`` of the
    projected queries, keys and values, scaled by ``sqrt(d_head)``; the heads'
    outputs are concatenated and mixed by ``W_o``. With ``W_q =
    in_proj_weight[:d].T`` (and likewise) this is ``torch.nn.MultiheadAttention``.

    Args:
      X_q: query inputs ``(B, T_q, d_model)``.
      X_kv: key/value inputs ``(B, T_kv, d_kv)``; pass ``X_q`` for self-attention.
      W_q: ``(d_model, h*d_head)``; W_k: ``(d_kv, h*d_head)``;
      W_v: ``(d_kv, h*d_v_head)``; W_o: ``(h*d_v_head, d_model)``.
      num_heads: ``h``; must divide the widths of W_q, W_k and W_v.
      mask: boolean, True = may attend: ``(T_q, T_kv)`` or ``(B, 1|T_q, T_kv)``
        shared by all heads, or ``(B, h, T_q, T_kv)``.

    Returns:
      ``(output (B, T_q, d_model), weights (B, h, T_q, T_kv))``.
    """
    X_q, X_kv = as_float("X_q", X_q), as_float("X_kv", X_kv)
    W_q, W_k, W_v = as_float("W_q", W_q), as_float("W_k", W_k), as_float("W_v", W_v)
    W_o = as_float("W_o", W_o)
    require_exact_ndim("X_q", X_q.shape, 3, "(B, T_q, d_model)")
    require_exact_ndim("X_kv", X_kv.shape, 3, "(B, T_kv, d_kv)")
    if X_q.shape[0] != X_kv.shape[0]:
        raise ValueError(
            f"X_q {fmt(X_q.shape)} and X_kv {fmt(X_kv.shape)} disagree on the batch size B "
            f"({X_q.shape[0]} vs {X_kv.shape[0]})"
        )
    check_weight("W_q", W_q.shape, X_q.shape[-1], "(d_model, h*d_head) for X_q")
    check_weight("W_k", W_k.shape, X_kv.shape[-1], "(d_kv, h*d_head) for X_kv")
    check_weight("W_v", W_v.shape, X_kv.shape[-1], "(d_kv, h*d_v_head) for X_kv")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)} and W_k {fmt(W_k.shape)} disagree on h*d_head "
            f"({W_q.shape[1]} vs {W_k.shape[1]})"
        )
    check_heads(f"W_q {fmt(W_q.shape)}", W_q.shape[1], num_heads)
    check_heads(f"W_v {fmt(W_v.shape)}", W_v.shape[1], num_heads)
    check_weight("W_o", W_o.shape, W_v.shape[1], "(h*d_v_head, d_model) after W_v")
    B, T_q, T_kv = X_q.shape[0], X_q.shape[1], X_kv.shape[1]
    if mask is not None:
        mask = head_mask(mask, (B, num_heads, T_q, T_kv))
    Q = split_heads(X_q @ W_q, num_heads)  # (B, h, T_q, d_head)
    K = split_heads(X_kv @ W_k, num_heads)  # (B, h, T_kv, d_head)
    V = split_heads(X_kv @ W_v, num_heads)  # (B, h, T_kv, d_v_head)
    heads, weights = attention(Q, K, V, mask)  # (B, h, T_q, d_v_head), (B, h, T_q, T_kv)
    return merge_heads(heads) @ W_o, weights  # (B, T_q, d_model), (B, h, T_q, T_kv)
