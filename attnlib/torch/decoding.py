"""Lesson 06: autoregressive decoding with a key/value cache.

Each step appends its key and value to the cache along the time axis (``dim=-2``) and attends
from its query to everything cached. That is the last row of causal attention over the whole
sequence so far, without a mask: nothing lies in the future of the newest position. Tensors stay
on the device they come from; the step is differentiable.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_cache, check_cache_pair, check_step

from . import _validate
from .dot_product import _attention


def cached_attention(
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    cache: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One decoding step of causal self-attention with a key/value cache.

    Args:
      q_t: the new query ``(B, h, 1, d)``, floating point.
      k_t: the new key ``(B, h, 1, d)``, same dtype and device.
      v_t: the new value ``(B, h, 1, d_v)`` (usually ``d_v = d``).
      cache: ``None`` before the first step, else ``(K (B, h, t, d), V (B, h, t, d_v))``, the
        keys and values of the ``t`` earlier steps as the previous call returned them.

    Returns:
      ``(out_t (B, h, 1, d_v), (K' (B, h, t+1, d), V' (B, h, t+1, d_v)))``: the attention
      output of the new step (through ``F.scaled_dot_product_attention``) and the cache with the
      step appended (``torch.cat`` along ``dim=-2``, new tensors; the inputs are not modified).
      ``out_t`` equals the last row of ``attention(Q, K', V', causal_mask(t+1))[0]``.
    """
    named = [("q_t", q_t), ("k_t", k_t), ("v_t", v_t)]
    if cache is not None:
        named += zip(("cache K", "cache V"), check_cache_pair(cache), strict=True)
    _validate.floating(*named)
    check_step(tuple(q_t.shape), tuple(k_t.shape), tuple(v_t.shape))
    if cache is None:
        K, V = k_t, v_t  # (B, h, 1, d), (B, h, 1, d_v)
    else:
        K_c, V_c = cache
        check_cache(tuple(K_c.shape), tuple(V_c.shape), tuple(k_t.shape), tuple(v_t.shape))
        K = torch.cat([K_c, k_t], dim=-2)  # (B, h, t+1, d)
        V = torch.cat([V_c, v_t], dim=-2)  # (B, h, t+1, d_v)
    out_t, _ = _attention(q_t, K, V, None, need_weights=False)  # (B, h, 1, d_v)
    return out_t, (K, V)
