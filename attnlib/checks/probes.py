"""Inputs that make mistakes show, made from fixed seeds (never the learner's RNG).

Shapes are chosen so that every axis has a different size — batch 2, heads 3,
m = 5 queries, n = 7 keys, d_k = 4, d_v = 6 — which turns a broadcasting or
transposition slip into a shape error or a wrong number instead of a silent
coincidence.
"""

from __future__ import annotations

import numpy as np

from .._shapes import fmt
from ._core import Probe

# (Q, K, V) shapes: unbatched, batched, multi-head with all sizes distinct, m = n, one key.
QKV_SHAPES = (
    ((5, 4), (7, 4), (7, 6)),
    ((2, 5, 4), (2, 7, 4), (2, 7, 6)),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)),
    ((3, 6, 8), (3, 6, 8), (3, 6, 2)),
    ((1, 4, 3), (1, 1, 3), (1, 1, 5)),
)


def rng(seed: int) -> np.random.Generator:
    """A generator of the checker's own, independent of any global random state."""
    return np.random.default_rng(20_240_000 + seed)


def normal(seed: int, *shapes: tuple[int, ...], scale: float = 1.0) -> list[np.ndarray]:
    """Standard-normal float64 arrays (times ``scale``) of the given shapes."""
    g = rng(seed)
    return [g.standard_normal(s) * scale for s in shapes]


def label(**arrays: object) -> str:
    """``"Q (2, 5, 4), K (2, 7, 4)"`` for arrays, ``"T=3"`` for anything else."""
    parts = []
    for name, value in arrays.items():
        shape = getattr(value, "shape", None)
        parts.append(f"{name} {fmt(shape)}" if shape is not None else f"{name}={value!r}")
    return ", ".join(parts)


def qk_probes(scale: float = 1.0) -> list[Probe]:
    """Query/key pairs over :data:`QKV_SHAPES`."""
    out = []
    for seed, (q, k, _) in enumerate(QKV_SHAPES):
        Q, K = normal(seed, q, k, scale=scale)
        out.append(Probe((Q, K), label=label(Q=Q, K=K)))
    return out


def qkv_probes(with_masks: bool = True) -> list[Probe]:
    """Query/key/value triples; with masks, also random, causal-like and fully masked rows."""
    out = []
    for seed, (q, k, v) in enumerate(QKV_SHAPES):
        Q, K, V = normal(seed, q, k, v)
        out.append(Probe((Q, K, V), label=label(Q=Q, K=K, V=V)))
        if not with_masks:
            continue
        m, n = q[-2], k[-2]
        mask = rng(100 + seed).random((*q[:-2], m, n)) < 0.6
        mask[..., 0, :] = False  # query 0 may attend to nothing: expect zeros, never NaN
        mask[..., -1, :] = True
        out.append(Probe((Q, K, V), {"mask": mask}, label(Q=Q, K=K, V=V, mask=mask)))
    return out
