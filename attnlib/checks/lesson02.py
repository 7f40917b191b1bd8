"""Checks for lesson 02-softmax-masking: softmax, masks, masked softmax, attention."""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as ref
from ._core import Arrays, Exercise, Mistake, Probe, transposed_key
from .probes import far, far_mask, far_qk, far_qkv_probes, float32, label, normal, qkv_probes, rng
from .tolerance import tolerance
from .weights import AXIS, OVERFLOW, masking_mistakes, weights_invariants

LESSON = "02-softmax-masking"


# --- softmax -------------------------------------------------------------------------------


def _softmax_probes() -> list[Probe]:
    (x,) = normal(1, (2, 3, 5), scale=3)
    (y,) = normal(2, (4, 6), scale=3)
    big = np.array([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1003.0]])
    big32 = np.array([[100.0, 99.0, 97.0], [-110.0, -111.0, -113.0]], dtype=np.float32)
    partly_masked = np.array([[0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]])
    return [
        Probe((x,), label=label(x=x)),
        Probe((y,), {"axis": -1}, label(x=y) + ", axis=-1"),
        Probe((x,), {"axis": 0}, label(x=x) + ", axis=0"),
        Probe((x,), {"axis": 1}, label(x=x) + ", axis=1"),
        Probe(
            (big,),
            label="x = [[1000, 999, 998], [-1000, -1001, -1003]]",
            nan_hint=(
                "exp overflows (or underflows) for inputs near ±1000: subtract each slice's "
                "own maximum, np.max(x, axis=axis, keepdims=True), before exp"
            ),
            nan_read=OVERFLOW,
        ),
        Probe((partly_masked,), label="x with some -inf entries"),
        float32(Probe((x,), {"axis": 1}, label(x=x) + ", axis=1")),
        Probe(
            (big32,),
            label="x = [[100, 99, 97], [-110, -111, -113]] in float32",
            nan_hint=(
                "in float32, exp overflows above about 88 and underflows below about -103: "
                "subtract each slice's own maximum, np.max(x, axis=axis, keepdims=True), "
                "before exp"
            ),
            nan_read=OVERFLOW,
        ),
    ]


def _axis(probe: Probe) -> int:
    return probe.kwargs.get("axis", -1)


softmax = Exercise(
    name="softmax",
    lesson=LESSON,
    read="02-softmax-masking, 'A stable softmax'",
    reference=ref.softmax,
    probes=_softmax_probes,
    mistakes=(
        Mistake(
            lambda p: (
                f"softmax ignores its axis argument: it normalised over the last axis, "
                f"not axis={_axis(p)}"
            ),
            lambda x, axis=-1: ref.softmax(x, axis=-1),
            applies=lambda p: _axis(p) not in (-1, np.ndim(p.args[0]) - 1),
        ),
        Mistake(
            "softmax normalises over the first axis; the default is the last axis (axis=-1)",
            lambda x, axis=-1: ref.softmax(x, axis=0),
            applies=lambda p: _axis(p) == -1,
            read=AXIS,
        ),
        Mistake(
            "softmax normalises over axis -2 instead of the given axis",
            lambda x, axis=-1: ref.softmax(x, axis=-2),
            applies=lambda p: np.ndim(p.args[0]) >= 2 and _axis(p) == -1,
            read=AXIS,
        ),
    ),
    invariants=(
        lambda probe, out: (
            ("softmax returns NaN or inf", OVERFLOW) if not np.isfinite(out[0]).all() else None
        ),
        lambda probe, out: _sums_to_one(probe, out[0], "along the given axis"),
    ),
)


def _sums_to_one(probe: Probe, weights: np.ndarray, what: str) -> str | None:
    sums = weights.sum(axis=_axis(probe))
    tol = tolerance(weights.dtype, probe.dtype)
    bad = ~np.isclose(sums, 1.0, rtol=tol.rtol, atol=tol.atol)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"values do not sum to 1 {what}: the slice at {list(idx)} sums to {sums[idx]:.4g}"
    return None


# --- causal_mask and padding_mask -------------------------------------------------------------


def _must_be_boolean(probe: Probe, out: Arrays) -> str | None:
    if out[0].dtype != np.bool_:
        return (
            f"returns a {out[0].dtype} mask; masks are boolean (True = may attend), "
            "e.g. np.tril(np.ones((T, T), dtype=bool))"
        )
    return None


causal_mask = Exercise(
    name="causal_mask",
    lesson=LESSON,
    read="02-softmax-masking, 'The causal mask'",
    reference=ref.causal_mask,
    probes=lambda: [Probe((T,), label=f"T={T}") for T in (4, 1, 7)],
    requirements=(_must_be_boolean,),
    mistakes=(
        Mistake(
            "the mask is inverted: True must mean 'may attend', i.e. key j <= query i",
            lambda T: ~ref.causal_mask(T),
        ),
        Mistake(
            "the mask is transposed: it lets each query see the future (j >= i) and hides the "
            "past; keep the lower triangle, j <= i",
            lambda T: ref.causal_mask(T).T,
        ),
        Mistake(
            "the diagonal is masked: a token may attend to itself (j <= i, not j < i)",
            lambda T: np.tril(np.ones((T, T), dtype=bool), k=-1),
        ),
    ),
)


def _padding_probes() -> list[Probe]:
    cases = (([3, 0, 5], 5), ([1, 4], 6), ([2], 2), ([0, 7, 3, 1], 7))
    return [
        Probe((np.array(lengths), n), label=f"lengths={lengths}, max_len={n}")
        for lengths, n in cases
    ]


padding_mask = Exercise(
    name="padding_mask",
    lesson=LESSON,
    read="02-softmax-masking, 'Padding masks'",
    reference=ref.padding_mask,
    probes=_padding_probes,
    requirements=(_must_be_boolean,),
    mistakes=(
        Mistake(
            "the mask has no query axis: return (B, 1, max_len) so it broadcasts over the "
            "queries of scores (B, m, n)",
            lambda lengths, n: ref.padding_mask(lengths, n)[:, 0, :],
        ),
        Mistake(
            "padding is applied to queries: the mask must be (B, 1, max_len) so that it hides "
            "padded keys (columns), not padded queries (rows)",
            lambda lengths, n: np.swapaxes(ref.padding_mask(lengths, n), -1, -2),
        ),
        Mistake(
            "the mask is inverted: True must mark real keys (position < length), not padding",
            lambda lengths, n: ~ref.padding_mask(lengths, n),
        ),
        Mistake(
            "off by one: position p is a real key when p < lengths[b], not p <= lengths[b]",
            lambda lengths, n: (np.arange(n) <= np.asarray(lengths)[:, None])[:, None, :],
        ),
    ),
)


# --- masked_softmax ----------------------------------------------------------------------------


def _masked_softmax_probes() -> list[Probe]:
    out = []
    (s,) = normal(3, (2, 3, 5, 7), scale=3)
    pad = np.arange(7) < np.array([7, 4])[:, None]  # (B, n) two sequences of lengths 7 and 4
    pad = pad[:, None, None, :]  # (B, 1, 1, n): batch 2 ≠ heads 3 ≠ length 5
    out.append(Probe((s,), {"mask": pad}, label(scores=s, mask=pad)))
    (s2,) = normal(4, (5, 7), scale=3)
    causal_like = np.tril(np.ones((5, 7), dtype=bool))
    causal_like[1] = False  # a query with nothing to attend to
    out.append(Probe((s2,), {"mask": causal_like}, label(scores=s2, mask=causal_like)))
    out.append(Probe((s2,), label=label(scores=s2) + ", mask=None"))
    (s3,) = normal(5, (3, 4, 6), scale=3)
    per_head = rng(6).random((3, 1, 6)) < 0.5
    per_head[:, :, 0] = True
    out.append(Probe((s3,), {"mask": per_head}, label(scores=s3, mask=per_head)))
    out.append(float32(out[0]))
    return [*out, *_far_score_probes()]


def _far_score_probes() -> list[Probe]:
    """Scores near ±1000 (rows all far below zero, all far above), unmasked and masked."""
    scores = ref.scaled_dot_scores(*far_qk())  # (5, 5)
    text = "scores (5, 5) near ±1000"
    masked = far((scores,), {"mask": far_mask()}, f"{text}, mask (5, 5)")
    return [far((scores,), text=f"{text}, mask=None"), masked, float32(masked)]


masked_softmax = Exercise(
    name="masked_softmax",
    depends=("softmax",),
    lesson=LESSON,
    read="02-softmax-masking, 'Masking before the softmax'",
    reference=ref.masked_softmax,
    probes=_masked_softmax_probes,
    mistakes=masking_mistakes(lambda scores: scores, lambda args, w: w),
    invariants=weights_invariants(0),
)


# --- attention ---------------------------------------------------------------------------------


def _attention_probes() -> list[Probe]:
    out = qkv_probes()
    Q, K, V = normal(7, (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4))  # d_v = d_k: K fits where V goes
    out.append(Probe((Q, K, V), label=label(Q=Q, K=K, V=V)))
    pad = (np.arange(7) < np.array([7, 3])[:, None])[:, None, None, :]  # (B, 1, 1, n)
    out.append(Probe((Q, K, V), {"mask": pad}, label(Q=Q, K=K, V=V, mask=pad)))
    out.append(float32(out[3]))  # batched, with a mask and a fully masked row
    return [*out, *far_qkv_probes()]


def _scaled_by(divisor):
    """Attention whose scores are divided by ``divisor(Q, K, V)`` instead of sqrt(d_k)."""

    def returns(Q, K, V, mask=None):
        w = ref.masked_softmax(ref.dot_scores(Q, K) / divisor(Q, K, V), mask)  # (..., m, n)
        return w @ V, w

    return returns


attention = Exercise(
    name="attention",
    depends=("masked_softmax", "softmax"),
    lesson=LESSON,
    read="02-softmax-masking, 'Scaled dot-product attention'",
    reference=ref.attention,
    probes=_attention_probes,
    outputs=("output", "weights"),
    hints=(transposed_key,),
    mistakes=(
        Mistake(
            "returns (weights, output); the order is (output, weights)",
            lambda *a, **kw: tuple(reversed(ref.attention(*a, **kw))),
        ),
        Mistake("scores are not scaled: divide Q Kᵀ by sqrt(d_k)", _scaled_by(lambda Q, K, V: 1.0)),
        Mistake(
            "scores scaled by d_k instead of sqrt(d_k)", _scaled_by(lambda Q, K, V: np.shape(Q)[-1])
        ),
        Mistake(
            "scores scaled by the square root of the number of keys n instead of sqrt(d_k)",
            _scaled_by(lambda Q, K, V: math.sqrt(np.shape(K)[-2])),
        ),
        Mistake(
            "scores scaled by sqrt(d_v) instead of sqrt(d_k): the scale comes from the width of "
            "the queries and keys, not of the values",
            _scaled_by(lambda Q, K, V: math.sqrt(np.shape(V)[-1])),
        ),
        Mistake(
            "the output uses the keys as values: multiply the weights by V, not K",
            lambda Q, K, V, mask=None: (
                ref.attention(Q, K, V, mask)[1] @ K,
                ref.attention(Q, K, V, mask)[1],
            ),
        ),
        *masking_mistakes(
            lambda Q, K, V: ref.scaled_dot_scores(Q, K), lambda args, w: (w @ args[2], w)
        ),
    ),
    invariants=weights_invariants(1),
)

EXERCISES = (softmax, causal_mask, padding_mask, masked_softmax, attention)
