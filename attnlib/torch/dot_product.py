"""Lesson 02: scaled dot-product attention, explicit or through PyTorch's fused kernel.

``attention(..., need_weights=True)`` spells the computation out (scores, masked softmax,
weighted sum) and returns the weights. ``need_weights=False`` calls
``F.scaled_dot_product_attention`` (SDPA), which may pick a fused kernel and never materialise
the ``(..., m, n)`` weights. Both give a zero output, never NaN, for a query with no allowed key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlib._shapes import check_qkv

from . import _validate
from .normalization import _softmax
from .scoring import _scale, _scaled_scores


def _check_qkv(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate dtypes, devices and shapes; return ``(scores_shape, output_shape)``."""
    _validate.floating(("Q", Q), ("K", K), ("V", V))
    scores_shape, out_shape = check_qkv(tuple(Q.shape), tuple(K.shape), tuple(V.shape))
    _scale(Q.shape[-1], tuple(Q.shape))
    return scores_shape, out_shape


def _is_causal(mask: torch.Tensor, m: int, n: int) -> bool:
    """True iff ``mask`` is exactly the ``(m, m)`` lower-triangular mask (leading axes of 1)."""
    if m != n or m == 0 or tuple(mask.shape[-2:]) != (m, n):
        return False
    if any(size != 1 for size in mask.shape[:-2]):
        return False
    tril = torch.ones(m, n, dtype=torch.bool, device=mask.device).tril()  # (m, n)
    return torch.equal(mask.reshape(m, n), tril)


def _sdpa(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """SDPA with broadcast batch axes and zero output for queries with no allowed key."""
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    m, n, d_k, d_v = Q.shape[-2], K.shape[-2], Q.shape[-1], V.shape[-1]
    if n == 0:  # no keys at all: every query is fully masked
        return torch.zeros(*batch, m, d_v, dtype=Q.dtype, device=Q.device)  # (..., m, d_v)
    Q = Q.expand(*batch, m, d_k)  # (..., m, d_k); fused kernels need equal batch axes
    K = K.expand(*batch, n, d_k)  # (..., n, d_k)
    V = V.expand(*batch, n, d_v)  # (..., n, d_v)
    if mask is None:
        return F.scaled_dot_product_attention(Q, K, V)  # (..., m, d_v)
    if _is_causal(mask, m, n):
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True)  # (..., m, d_v)
    # Some SDPA kernels give NaN (and NaN gradients) for a row with no allowed key. Let such a
    # row attend everywhere, which is harmless, then replace its output by zeros.
    allowed = mask.any(dim=-1, keepdim=True)  # (..., m or 1, 1)
    safe_mask = mask | ~allowed  # (..., m or 1, n)
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=safe_mask)  # (..., m, d_v)
    return torch.where(allowed, out, torch.zeros((), dtype=out.dtype, device=out.device))


def _attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`attention` without validation."""
    if not need_weights:
        return _sdpa(Q, K, V, mask), None
    scores = _scaled_scores(Q, K)  # (..., m, n)
    weights = _softmax(scores, dim=-1, mask=mask)  # (..., m, n)
    return weights @ V, weights  # (..., m, d_v), (..., m, n)


def attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention ``softmax(Q Kᵀ / sqrt(d_k)) V``.

    Args:
      Q: queries ``(..., m, d_k)``, floating point.
      K: keys ``(..., n, d_k)``, same dtype and device.
      V: values ``(..., n, d_v)``; batch axes of ``Q``, ``K``, ``V`` broadcast.
      mask: optional boolean mask broadcasting to the scores ``(..., m, n)``, True = may attend
        (``(m, n)``, ``(B, 1, n)``, ...).
      need_weights: if True compute explicitly and return the weights; if False use
        ``F.scaled_dot_product_attention`` (``is_causal=True`` when ``mask`` is exactly the
        causal mask) and return ``None`` for them.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n) or None)``. A query with no allowed key gets
      zero weights and a zero output.
    """
    scores_shape, _ = _check_qkv(Q, K, V)
    mask = _validate.mask(mask, scores_shape, ("Q", Q))
    return _attention(Q, K, V, mask, bool(need_weights))
