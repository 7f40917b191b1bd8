"""Inputs that make mistakes show, made from fixed seeds (never the learner's RNG).

Shapes are chosen so that every axis has a different size — batch 2, heads 3,
m = 5 queries, n = 7 keys, d_k = 4, d_v = 6 — which turns a broadcasting or
transposition slip into a shape error or a wrong number instead of a silent
coincidence. Beyond those: rows with no allowed key, scores far above and far
below zero (beyond the range of ``exp``), and float32 copies of some probes.
"""

from __future__ import annotations

import math

import numpy as np

from ._core import Probe, arguments
from .weights import FAR_HINT, OVERFLOW

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
    return arguments(arrays.items())


def float32(probe: Probe) -> Probe:
    """The same call with every float64 array in float32 (and labelled so)."""

    def narrow(value: object) -> object:
        if isinstance(value, np.ndarray) and value.dtype == np.float64:
            return value.astype(np.float32)
        return value

    return Probe(
        tuple(narrow(a) for a in probe.args),
        {k: narrow(v) for k, v in probe.kwargs.items()},
        f"{probe.label}, all in float32" if probe.label else "",
        probe.nan_hint,
        probe.nan_read,
    )


def far(args: tuple, kwargs: dict | None = None, text: str = "") -> Probe:
    """A probe whose allowed scores lie far above or far below zero (see :func:`far_qk`)."""
    return Probe(args, kwargs or {}, text, nan_hint=FAR_HINT, nan_read=OVERFLOW)


# Scaled dot-product scores a_i + b_i c_j (see far_qk): row 0 all near -1000, row 1 all near
# +1000, row 2 ordinary, row 3 near -1000 rising, row 4 small. Key 4 scores +5 for query 0:
# masked there, it must not set that row's maximum.
FAR_A = np.array([-1000.0, 1000.0, 0.5, -1000.0, 0.02])
FAR_B = np.array([-1.0, 1.0, 0.25, 1.0, 0.001])
FAR_C = np.array([0.0, 1.0, 3.0, 6.0, -1005.0])


def far_qk() -> tuple[np.ndarray, np.ndarray]:
    """``Q (5, 2)`` and ``K (5, 2)`` whose scaled dot products ``Q Kᵀ / sqrt(2)`` are
    ``a_i + b_i c_j``: rows of scores all far below zero (row 0: -1000, -1001, -1003, -1006)
    and all far above (row 1: 1000 … 1006), where every allowed ``exp`` underflows or
    overflows unless the row's maximum is subtracted first."""
    Q = math.sqrt(2) * np.stack([FAR_A, FAR_B], axis=-1)  # (m, 2)
    K = np.stack([np.ones_like(FAR_C), FAR_C], axis=-1)  # (n, 2)
    return Q, K


def far_mask() -> np.ndarray:
    """``(5, 5)``: query 0 may not see key 4 (its only score above zero), a few others hidden;
    every query keeps at least one key."""
    mask = np.ones((5, 5), dtype=bool)
    mask[0, 4] = False
    mask[2, 1] = False
    mask[3, [0, 4]] = False
    return mask


def qk_probes(scale: float = 1.0) -> list[Probe]:
    """Query/key pairs over :data:`QKV_SHAPES`, then the batched one in float32."""
    out = []
    for seed, (q, k, _) in enumerate(QKV_SHAPES):
        Q, K = normal(seed, q, k, scale=scale)
        out.append(Probe((Q, K), label=label(Q=Q, K=K)))
    return [*out, float32(out[2])]


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


def far_qkv_probes() -> list[Probe]:
    """Attention-style ``(Q, K, V)`` with far scores, without and with :func:`far_mask`,
    the masked one also in float32."""
    Q, K = far_qk()
    (V,) = normal(140, (5, 3))
    text = "Q (5, 2), K (5, 2), V (5, 3) with scores near ±1000"
    masked = far((Q, K, V), {"mask": far_mask()}, f"{text}, mask (5, 5)")
    return [far((Q, K, V), text=text), masked, float32(masked)]
