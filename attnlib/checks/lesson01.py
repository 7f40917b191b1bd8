"""Checks for lesson 01-scoring: dot, scaled dot, additive and cosine scores."""

from __future__ import annotations

import math
import re

import numpy as np

from .. import numpy as ref
from .._shapes import fmt
from ._core import Exercise, Mistake, Probe, broadcast_shapes, transposed_key
from .probes import float32, label, normal, qk_probes
from .tolerance import tolerance

LESSON = "01-scoring"


def _swap(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _d(Q) -> int:
    return np.shape(Q)[-1]


def _transposed(fn):
    return Mistake(
        "scores are transposed: row i must hold query i against every key, i.e. Q Kᵀ, not K Qᵀ",
        lambda Q, K, *rest: _swap(fn(Q, K, *rest)),
    )


def _scaled(factor, message):
    """A mistake that scales the raw dot products by ``factor(Q, K)``."""
    return Mistake(message, lambda Q, K: ref.dot_scores(Q, K) * factor(Q, K))


dot_scores = Exercise(
    name="dot_scores",
    lesson=LESSON,
    read="01-scoring, 'Dot-product scores'",
    reference=ref.dot_scores,
    probes=qk_probes,
    hints=(transposed_key,),
    mistakes=(
        _transposed(ref.dot_scores),
        _scaled(
            lambda Q, K: 1 / math.sqrt(_d(Q)),
            "dot_scores divides by sqrt(d_k); the raw dot product is unscaled "
            "(scaling belongs to scaled_dot_scores)",
        ),
        Mistake(
            "multiplies Q and K element by element and sums over the wrong axis; each score "
            "is the dot product over the feature axis d_k",
            lambda Q, K: np.sum(Q * K, axis=-2) if np.shape(Q) == np.shape(K) else None,
        ),
        Mistake(
            "np.dot on arrays with batch axes pairs every batch entry with every other one, "
            "(B, m, d_k) · (B, d_k, n) → (B, m, B, n); Q @ np.swapaxes(K, -1, -2) (np.matmul) "
            "multiplies them batch by batch",
            lambda Q, K: np.dot(Q, np.swapaxes(K, -1, -2)),
            applies=lambda p: np.ndim(p.args[0]) > 2,
        ),
    ),
)

scaled_dot_scores = Exercise(
    name="scaled_dot_scores",
    depends=("dot_scores",),
    lesson=LESSON,
    read="01-scoring, 'Why divide by sqrt(d_k)'",
    reference=ref.scaled_dot_scores,
    probes=qk_probes,
    hints=(transposed_key,),
    mistakes=(
        _transposed(ref.scaled_dot_scores),
        _scaled(lambda Q, K: 1.0, "scores are not scaled: divide Q Kᵀ by sqrt(d_k)"),
        _scaled(lambda Q, K: 1 / _d(Q), "scores scaled by d_k instead of sqrt(d_k)"),
        _scaled(
            lambda Q, K: math.sqrt(_d(Q)),
            "scores multiplied by sqrt(d_k) instead of divided by it",
        ),
        _scaled(
            lambda Q, K: 1 / math.sqrt(np.shape(K)[-2]),
            "scores scaled by the square root of the number of keys n instead of sqrt(d_k)",
        ),
        _scaled(
            lambda Q, K: 1 / math.sqrt(np.shape(Q)[-2]),
            "scores scaled by the square root of the number of queries m instead of sqrt(d_k)",
        ),
    ),
)


def _additive_probes() -> list[Probe]:
    out = []
    shapes = (((5, 4), (7, 3), 6), ((2, 5, 4), (2, 7, 3), 6), ((2, 3, 4, 5), (2, 3, 6, 5), 2))
    for seed, (q, k, h) in enumerate(shapes):
        Q, K, W_q, W_k, v = normal(30 + seed, q, k, (q[-1], h), (k[-1], h), (h,))
        out.append(Probe((Q, K, W_q, W_k, v), label=label(Q=Q, K=K, W_q=W_q, W_k=W_k, v=v)))
    return [*out, float32(out[1])]


def _additive(Q, K, W_q, W_k, v, *, act=np.tanh, swap=False, after=False):
    if swap:
        W_q, W_k = W_k, W_q
    q = Q @ W_q  # (..., m, h)
    k = K @ W_k  # (..., n, h)
    pre = q[..., :, None, :] + k[..., None, :, :]  # (..., m, n, h)
    return act(pre @ v) if after else act(pre) @ v


def unpaired(error: Exception, probe: Probe) -> str:
    """q W_q ``(..., m, h)`` and k W_k ``(..., n, h)`` added as they are: no pairs."""
    Q, K, W_q = (np.shape(a) for a in probe.args[:3])
    ends = {shape[-2:] for shape in broadcast_shapes(error)}
    if {(Q[-2], W_q[-1]), (K[-2], W_q[-1])} <= ends:
        return (
            f"; q W_q is (..., m, h) = (..., {Q[-2]}, {W_q[-1]}) and k W_k is (..., n, h) = "
            f"(..., {K[-2]}, {W_q[-1]}): give the first a key axis and the second a query axis, "
            "(..., m, 1, h) + (..., 1, n, h), so that every query meets every key"
        )
    return ""


def projected_wrong(error: Exception, probe: Probe) -> str:
    """A product of the queries with W_k, or of the keys with W_q, whose widths differ."""
    Q, K, W_q, W_k = (np.shape(a) for a in probe.args[:4])
    sizes = re.search(r"size (\d+) is different from (\d+)|\(\d+x(\d+) and (\d+)x\d+\)", str(error))
    mismatch = {int(n) for n in sizes.groups() if n} if sizes else set()
    if Q[-1] != K[-1] and mismatch == {Q[-1], K[-1]}:
        return (
            f"; Q (..., m, d_q) goes through W_q (d_q, h) = {fmt(W_q)} and K (..., n, d_k) "
            f"through W_k (d_k, h) = {fmt(W_k)}"
        )
    return ""


additive_scores = Exercise(
    name="additive_scores",
    lesson=LESSON,
    read="01-scoring, 'Additive (Bahdanau) scores'",
    reference=ref.additive_scores,
    probes=_additive_probes,
    hints=(unpaired, projected_wrong),
    mistakes=(
        _transposed(ref.additive_scores),
        Mistake(
            "tanh is missing: additive scores are v · tanh(q W_q + k W_k)",
            lambda *a: _additive(*a, act=lambda x: x),
        ),
        Mistake(
            "tanh is applied after the dot product with v; it belongs inside: "
            "v · tanh(q W_q + k W_k)",
            lambda *a: _additive(*a, after=True),
        ),
        Mistake(
            "W_q and W_k are swapped: queries go through W_q, keys through W_k",
            lambda *a: _additive(*a, swap=True),
        ),
    ),
)


def _cosine_probes() -> list[Probe]:
    out = []
    for probe in qk_probes():
        Q, K = (a.copy() for a in probe.args)
        Q[..., 0, :] = 0.0  # a zero query must score 0 against everything, not NaN
        K[..., -1, :] *= 1e3  # scale must not matter
        out.append(Probe((Q, K), label=probe.label + " (one zero query)"))
    return out


def _norms(x):
    return np.linalg.norm(x, axis=-1)  # (..., m)


def _unit(x, axis=-1):
    return x / np.linalg.norm(x, axis=axis, keepdims=True)


cosine_scores = Exercise(
    name="cosine_scores",
    depends=("dot_scores",),
    lesson=LESSON,
    read="01-scoring, 'Cosine scores'",
    reference=ref.cosine_scores,
    probes=_cosine_probes,
    hints=(transposed_key,),
    mistakes=(
        _transposed(ref.cosine_scores),
        Mistake(
            "vectors are not normalised: cosine similarity divides q · k by |q| |k|",
            lambda Q, K: ref.dot_scores(Q, K),
        ),
        Mistake(
            "eps is added to |q| |k|, which shifts the scores of short vectors; clamp each norm "
            "instead, max(|q|, eps) and max(|k|, eps), so that only a vector shorter than eps "
            "is affected",
            lambda Q, K, eps=1e-8: (
                ref.dot_scores(Q, K) / (_norms(Q)[..., :, None] * _norms(K)[..., None, :] + eps)
            ),
        ),
        Mistake(
            "only the queries are normalised: divide by the norms of both q and k",
            lambda Q, K: ref.dot_scores(np.nan_to_num(_unit(Q)), K),
        ),
        Mistake(
            "only the keys are normalised: divide by the norms of both q and k",
            lambda Q, K: ref.dot_scores(Q, _unit(K)),
        ),
    ),
    invariants=(
        lambda probe, out: (
            "a zero vector gives NaN; guard the norm with eps so it scores 0"
            if np.isnan(out[0]).any()
            else None
        ),
        lambda probe, out: (
            f"cosine scores must lie in [-1, 1], got {np.nanmax(np.abs(out[0])):.4g}"
            if np.nanmax(np.abs(out[0])) > 1 + tolerance(out[0].dtype, probe.dtype).rtol
            else None
        ),
    ),
)

EXERCISES = (dot_scores, scaled_dot_scores, additive_scores, cosine_scores)
