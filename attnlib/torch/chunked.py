"""Lesson 05: exact attention in key blocks with an online softmax (the FlashAttention idea).

Instead of the full ``(..., m, n)`` score matrix, only one ``(..., m, block_size)`` block of
scores exists at a time. Per query we carry the running maximum ``r``, the running normaliser
``l = Σ exp(s - r)`` and the running unnormalised output ``acc = Σ exp(s - r) v``; when a new
block raises the maximum, the old ``l`` and ``acc`` are rescaled by ``exp(r_old - r_new)``.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_positive_int

from . import _validate
from .dot_product import _check_qkv
from .scoring import _scale


def chunked_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    block_size: int = 128,
    causal: bool = False,
) -> torch.Tensor:
    """Exact scaled dot-product attention computed block by block over the keys.

    Equals ``attention(Q, K, V, mask)[0]`` (up to rounding) while holding at most
    ``(..., m, block_size)`` scores. 16-bit inputs accumulate in float32.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``; batch axes of ``Q``, ``K``, ``V`` broadcast.
      block_size: number of keys per block (positive int).
      causal: if True, query ``i`` attends to key ``j`` iff ``j <= i`` (queries and keys aligned
        at the start; the same as ``causal_mask(T)`` when ``m == n``).

    Returns:
      output ``(..., m, d_v)`` in the dtype of ``Q``.
    """
    _, out_shape = _check_qkv(Q, K, V)
    block_size = check_positive_int("block_size", block_size)
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    m, n = Q.shape[-2], K.shape[-2]
    acc_dtype = _validate.compute_dtype(Q.dtype)
    q = Q.to(acc_dtype) * _scale(Q.shape[-1], tuple(Q.shape))  # (..., m, d_k)
    acc = torch.zeros(out_shape, dtype=acc_dtype, device=Q.device)  # (..., m, d_v)
    total = torch.zeros(*out_shape[:-1], 1, dtype=acc_dtype, device=Q.device)  # (..., m, 1)
    running_max = torch.full_like(total, float("-inf"))  # (..., m, 1)
    query_pos = torch.arange(m, device=Q.device).unsqueeze(-1)  # (m, 1)
    for start in range(0, n, block_size):
        if causal and start > m - 1:
            break  # every later key is in the future of every query
        k = K[..., start : start + block_size, :].to(acc_dtype)  # (..., b, d_k)
        v = V[..., start : start + block_size, :].to(acc_dtype)  # (..., b, d_v)
        s = q @ k.transpose(-2, -1)  # (..., m, b)
        if causal:
            key_pos = torch.arange(start, start + k.shape[-2], device=Q.device)  # (b,)
            s = s.masked_fill(key_pos > query_pos, float("-inf"))  # (..., m, b)
        # The maximum only keeps exp() in range; the result does not depend on it.
        new_max = torch.maximum(running_max, s.amax(dim=-1, keepdim=True)).detach()  # (..., m, 1)
        shift = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        p = torch.exp(s - shift)  # (..., m, b)
        rescale = torch.exp(running_max - shift)  # (..., m, 1); 0 while nothing was seen
        total = total * rescale + p.sum(dim=-1, keepdim=True)  # (..., m, 1)
        acc = acc * rescale + p @ v  # (..., m, d_v)
        running_max = new_max
    out = acc / torch.where(total > 0, total, torch.ones_like(total))  # (..., m, d_v)
    return out.to(Q.dtype)
