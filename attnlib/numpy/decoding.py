"""Autoregressive decoding with a key/value cache.

A decoder generates one token at a time, and with a causal mask the newest query attends to
every step so far. Recomputing the keys and values of the whole prefix at every step costs
``O(t)`` projections per step; keeping them in a cache costs one. Each step appends its key and
value to the cache and attends from its query to everything cached: that is exactly the last
row of causal attention over the whole sequence, with no mask needed (nothing lies in the
future of the newest position).
"""

from __future__ import annotations

import numpy as np

from .._shapes import check_cache, check_cache_pair, check_step
from ._validate import as_float
from .attention import attention


def cached_attention(q_t, k_t, v_t, cache=None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """One decoding step of causal self-attention with a key/value cache.

    Args:
      q_t: the new query ``(B, h, 1, d)``.
      k_t: the new key ``(B, h, 1, d)``.
      v_t: the new value ``(B, h, 1, d_v)`` (usually ``d_v = d``).
      cache: ``None`` before the first step, else ``(K (B, h, t, d), V (B, h, t, d_v))``, the
        keys and values of the ``t`` earlier steps as the previous call returned them.

    Returns:
      ``(out_t (B, h, 1, d_v), (K' (B, h, t+1, d), V' (B, h, t+1, d_v)))``: the attention
      output of the new step and the cache with the step appended along the time axis (-2).
      ``out_t`` equals the last row of ``attention(Q, K', V', causal_mask(t+1))[0]``. The
      cache is a new array each step (``np.concatenate``); the inputs are not modified.
    """
    q_t, k_t, v_t = as_float("q_t", q_t), as_float("k_t", k_t), as_float("v_t", v_t)
    check_step(q_t.shape, k_t.shape, v_t.shape)
    if cache is None:
        K, V = k_t, v_t  # (B, h, 1, d), (B, h, 1, d_v)
    else:
        K_c, V_c = check_cache_pair(cache)
        K_c, V_c = as_float("cache K", K_c), as_float("cache V", V_c)
        check_cache(K_c.shape, V_c.shape, k_t.shape, v_t.shape)
        K = np.concatenate([K_c, k_t], axis=-2)  # (B, h, t+1, d)
        V = np.concatenate([V_c, v_t], axis=-2)  # (B, h, t+1, d_v)
    out_t, _ = attention(q_t, K, V)  # (B, h, 1, d_v): the newest query sees every step
    return out_t, (K, V)
