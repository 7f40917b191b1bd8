"""Lesson 04: splitting features into heads and multi-head attention.

Head ``i`` owns columns ``i*d_head:(i+1)*d_head`` of the projected features. With
``W_q = in_proj_weight[:d].T`` etc. (see :class:`attnlib.torch.MultiHeadAttention`) this is
exactly ``torch.nn.MultiheadAttention``.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_heads, check_weight, fmt, require_exact_ndim, require_ndim

from . import _validate
from .dot_product import _attention


def _split(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    *lead, T, width = X.shape
    X = X.reshape(*lead, T, num_heads, width // num_heads)  # (..., T, h, d)
    return X.transpose(-2, -3)  # (..., h, T, d)


def _merge(X: torch.Tensor) -> torch.Tensor:
    *lead, h, T, d = X.shape
    X = X.transpose(-2, -3)  # (..., T, h, d)
    return X.reshape(*lead, T, h * d)  # (..., T, h*d)


def split_heads(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the features into heads: ``(B, T, h*d) -> (B, h, T, d)``.

    Args:
      X: ``(B, T, h*d)``; head ``i`` gets columns ``i*d:(i+1)*d``. Any number of leading axes
        is kept: ``(..., T, h*d) -> (..., h, T, d)``.
      num_heads: ``h``, a positive int dividing the last axis.

    Returns:
      ``(B, h, T, d)``, a view of ``X`` where possible.
    """
    _validate.tensor("X", X)
    require_ndim("X", tuple(X.shape), 2, "(B, T, h*d)")
    check_heads(f"X {fmt(X.shape)}", X.shape[-1], num_heads)
    return _split(X, num_heads)  # (B, h, T, d)


def merge_heads(X: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again, the inverse of :func:`split_heads`.

    Args:
      X: ``(B, h, T, d)``; any number of leading axes is kept: ``(..., h, T, d)``.

    Returns:
      ``(B, T, h*d)`` with head ``i`` in columns ``i*d:(i+1)*d``.
    """
    _validate.tensor("X", X)
    require_ndim("X", tuple(X.shape), 3, "(B, h, T, d)")
    return _merge(X)  # (B, T, h*d)


def _check_bias(name: str, b: torch.Tensor | None, width: int, ref: torch.Tensor) -> None:
    if b is None:
        return
    _validate.floating(("X_q", ref), (name, b))
    require_exact_ndim(name, tuple(b.shape), 1, f"({width},)")
    if b.shape[0] != width:
        raise ValueError(f"{name} {fmt(b.shape)} must have {width} entries, one per column")


def _head_mask(
    mask: torch.Tensor | None, B: int, h: int, T_q: int, T_kv: int, X_q: torch.Tensor
) -> torch.Tensor | None:
    """Validate a mask for multi-head scores and give it a head axis.

    Masks of up to three axes, ``(T_q, T_kv)`` or ``(B, T_q or 1, T_kv)``, apply to every head
    (a three-axis mask gets a head axis, ``(B, 1, T_q or 1, T_kv)``, so ``B`` never meets ``h``);
    a four-axis mask broadcasts against the scores ``(B, h, T_q, T_kv)`` as it is.
    """
    if mask is None:
        return None
    _validate.bool_tensor("mask", mask, _validate.MASK_HINT)
    if mask.ndim == 3:
        mask = mask.unsqueeze(-3)  # (B, 1, T_q or 1, T_kv)
    return _validate.mask(mask, (B, h, T_q, T_kv), ("X_q", X_q))


def _project(X: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return X @ W if b is None else X @ W + b  # (B, T, width)


def _multi_head_attention(
    X_q: torch.Tensor,
    X_kv: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None,
    need_weights: bool,
    biases: tuple[torch.Tensor | None, ...],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`multi_head_attention` without validation."""
    b_q, b_k, b_v, b_o = biases
    q = _project(X_q, W_q, b_q)  # (B, T_q, h*d_head)
    k = _project(X_kv, W_k, b_k)  # (B, T_kv, h*d_head)
    v = _project(X_kv, W_v, b_v)  # (B, T_kv, h*d_v)
    Q = _split(q, num_heads)  # (B, h, T_q, d_head)
    K = _split(k, num_heads)  # (B, h, T_kv, d_head)
    V = _split(v, num_heads)  # (B, h, T_kv, d_v)
    out, weights = _attention(Q, K, V, mask, need_weights)  # (B, h, T_q, d_v), (B, h, T_q, T_kv)
    out = _merge(out) @ W_o  # (B, T_q, d_model)
    if b_o is not None:
        out = out + b_o  # (B, T_q, d_model)
    return out, weights


def multi_head_attention(
    X_q: torch.Tensor,
    X_kv: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None = None,
    *,
    need_weights: bool = True,
    b_q: torch.Tensor | None = None,
    b_k: torch.Tensor | None = None,
    b_v: torch.Tensor | None = None,
    b_o: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multi-head attention: project, split into heads, attend per head, merge, project out.

    Each head scales its scores by ``sqrt(d_head)``. Pass ``X_kv = X_q`` for self-attention.

    Args:
      X_q: query inputs ``(B, T_q, d_model)``.
      X_kv: key/value inputs ``(B, T_kv, d_kv)``.
      W_q: ``(d_model, h*d_head)``; head ``i`` uses columns ``i*d_head:(i+1)*d_head``.
      W_k: ``(d_kv, h*d_head)``.
      W_v: ``(d_kv, h*d_v)`` (usually ``d_v = d_head``).
      W_o: ``(h*d_v, d_out)`` (usually ``d_out = d_model``).
      num_heads: ``h``, a positive int dividing the widths of ``W_q`` and ``W_v``.
      mask: optional boolean mask, True = may attend: ``(T_q, T_kv)`` or ``(B, T_q or 1, T_kv)``
        for all heads alike (``padding_mask`` and ``from_key_padding_mask`` give
        ``(B, 1, T_kv)``), or ``(B or 1, h or 1, T_q or 1, T_kv)`` per head.
      need_weights: if False use the SDPA fast path and return ``None`` for the weights.
      b_q, b_k, b_v: optional biases ``(h*d_head,)``, ``(h*d_head,)``, ``(h*d_v,)`` added after
        the input projections.
      b_o: optional bias ``(d_out,)`` added after the output projection.

    Returns:
      ``(output (B, T_q, d_out), weights (B, h, T_q, T_kv) or None)``.
    """
    _validate.floating(
        ("X_q", X_q), ("X_kv", X_kv), ("W_q", W_q), ("W_k", W_k), ("W_v", W_v), ("W_o", W_o)
    )
    require_exact_ndim("X_q", tuple(X_q.shape), 3, "(B, T_q, d_model)")
    require_exact_ndim("X_kv", tuple(X_kv.shape), 3, "(B, T_kv, d_kv)")
    if X_q.shape[0] != X_kv.shape[0]:
        raise ValueError(
            f"X_q {fmt(X_q.shape)} and X_kv {fmt(X_kv.shape)} disagree on the batch size B "
            f"({X_q.shape[0]} vs {X_kv.shape[0]})"
        )
    check_weight("W_q", tuple(W_q.shape), X_q.shape[-1], "(d_model, h*d_head) for X_q")
    check_weight("W_k", tuple(W_k.shape), X_kv.shape[-1], "(d_kv, h*d_head) for X_kv")
    check_weight("W_v", tuple(W_v.shape), X_kv.shape[-1], "(d_kv, h*d_v_head) for X_kv")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(
            f"W_q {fmt(W_q.shape)} and W_k {fmt(W_k.shape)} disagree on h*d_head "
            f"({W_q.shape[1]} vs {W_k.shape[1]})"
        )
    d_head = check_heads(f"W_q {fmt(W_q.shape)}", W_q.shape[1], num_heads)
    if d_head == 0:
        raise ValueError(f"W_q {fmt(W_q.shape)} has no columns; each head needs d_head >= 1")
    check_heads(f"W_v {fmt(W_v.shape)}", W_v.shape[1], num_heads)
    check_weight("W_o", tuple(W_o.shape), W_v.shape[1], "(h*d_v_head, d_model) after W_v")
    B = X_q.shape[0]
    _check_bias("b_q", b_q, W_q.shape[1], X_q)
    _check_bias("b_k", b_k, W_k.shape[1], X_q)
    _check_bias("b_v", b_v, W_v.shape[1], X_q)
    _check_bias("b_o", b_o, W_o.shape[1], X_q)
    mask = _head_mask(mask, B, num_heads, X_q.shape[1], X_kv.shape[1], X_q)
    return _multi_head_attention(
        X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask, bool(need_weights), (b_q, b_k, b_v, b_o)
    )
