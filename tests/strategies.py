"""Hypothesis strategies shared by the test modules: random attention problems."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

SEEDS = st.integers(0, 2**32 - 1)


@st.composite
def qkv_shapes(draw, max_batch_axes: int = 2, max_len: int = 9, max_dim: int = 8):
    """Shapes ``(Q, K, V)`` with broadcastable batch axes, ``m != n`` allowed."""
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=max_batch_axes)))
    m, n = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    d_k, d_v = draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim))
    return (*batch, m, d_k), (*batch, n, d_k), (*batch, n, d_v)


def normal(seed: int, *shapes, scale: float = 1.0, dtype=np.float64):
    """Standard-normal arrays of the given shapes from one seed."""
    rng = np.random.default_rng(seed)
    return tuple((rng.standard_normal(s) * scale).astype(dtype) for s in shapes)


def random_mask(seed: int, shape, p_keep: float = 0.6) -> np.ndarray:
    """A boolean mask of ``shape`` with about ``p_keep`` of the entries True."""
    return np.random.default_rng(seed + 1).random(shape) < p_keep
