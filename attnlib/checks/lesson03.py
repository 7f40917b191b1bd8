"""Checks for lesson 03-self-cross: projections, cross-attention, hard attention, positions."""

from __future__ import annotations

import numpy as np

from .. import numpy as ref
from ._core import Exercise, Mistake, Probe, transposed_key
from .probes import far, far_mask, far_qk, far_qkv_probes, float32, label, normal, rng
from .weights import masking_mistakes, weights_invariants

LESSON = "03-self-cross"


def _self_probes() -> list[Probe]:
    out = []
    shapes = (((2, 5, 6), 4, 3), ((5, 6), 4, 4), ((3, 4, 8), 8, 8))
    for seed, (x, dk, dv) in enumerate(shapes):
        X, W_q, W_k, W_v = normal(40 + seed, x, (x[-1], dk), (x[-1], dk), (x[-1], dv))
        args = (X, W_q, W_k, W_v)
        text = label(X=X, W_q=W_q, W_k=W_k, W_v=W_v)
        out.append(Probe(args, label=text))
        T = x[-2]
        causal = ref.causal_mask(T)
        out.append(Probe(args, {"mask": causal}, text + f", mask = causal_mask({T})"))
        holes = rng(45 + seed).random((*x[:-2], T, T)) < 0.6  # (..., T, T)
        holes[..., 0, :] = False  # query 0 may attend to nothing: zeros, never NaN
        holes[..., -1, 0] = True
        out.append(Probe(args, {"mask": holes}, f"{text}, {label(mask=holes)} (row 0 empty)"))
    return [*out, float32(out[-1]), *_far_self_probes()]


def _far_self_probes() -> list[Probe]:
    """X = I, so that Q = W_q and K = W_k give scores near ±1000 (see probes.far_qk)."""
    W_q, W_k = far_qk()  # (5, 2) each
    X = np.eye(5)  # (T, d_model)
    (W_v,) = normal(48, (5, 3))
    text = "X = I (5, 5), W_q (5, 2), W_k (5, 2), W_v (5, 3) with scores near ±1000"
    masked = far((X, W_q, W_k, W_v), {"mask": far_mask()}, f"{text}, mask (5, 5)")
    return [far((X, W_q, W_k, W_v), text=text), masked, float32(masked)]


def _self_from(Q_of, K_of, V_of):
    def returns(X, W_q, W_k, W_v, mask=None):
        return ref.attention(Q_of(X, W_q, W_k, W_v), K_of(X, W_q, W_k, W_v),
                             V_of(X, W_q, W_k, W_v), mask)  # fmt: skip

    return returns


def _projected_scores(X, W_q, W_k, W_v):
    return ref.scaled_dot_scores(X @ W_q, X @ W_k)


self_attention = Exercise(
    name="self_attention",
    lesson=LESSON,
    read="03-self-cross, 'Three projections of one X'",
    reference=ref.self_attention,
    probes=_self_probes,
    outputs=("output", "weights"),
    mistakes=(
        Mistake(
            "keys are projected with W_q: use K = X @ W_k",
            _self_from(
                lambda X, q, k, v: X @ q, lambda X, q, k, v: X @ q, lambda X, q, k, v: X @ v
            ),
        ),
        Mistake(
            "queries are projected with W_k: use Q = X @ W_q",
            _self_from(
                lambda X, q, k, v: X @ k, lambda X, q, k, v: X @ k, lambda X, q, k, v: X @ v
            ),
        ),
        Mistake(
            "the values are not projected: use V = X @ W_v",
            _self_from(lambda X, q, k, v: X @ q, lambda X, q, k, v: X @ k, lambda X, q, k, v: X),
        ),
        Mistake(
            "the projections multiply on the left (W @ X); here they multiply on the right: "
            "Q = X @ W_q",
            _self_from(
                lambda X, q, k, v: X @ q.T, lambda X, q, k, v: X @ k.T, lambda X, q, k, v: X @ v.T
            ),  # fmt: skip
        ),
        *masking_mistakes(_projected_scores, lambda a, w: (w @ (a[0] @ a[3]), w)),
    ),
    invariants=weights_invariants(1),
)


def _cross_probes() -> list[Probe]:
    out = []
    shapes = (
        ((2, 3, 6), (2, 4, 6), 5, 7),
        ((3, 5), (7, 4), 4, 2),
        ((2, 2, 4, 3), (2, 2, 6, 5), 3, 3),
    )
    for seed, (y, h, dk, dv) in enumerate(shapes):
        Y, H, W_q, W_k, W_v = normal(50 + seed, y, h, (y[-1], dk), (h[-1], dk), (h[-1], dv))
        args = (Y, H, W_q, W_k, W_v)
        text = label(Y=Y, H=H, W_q=W_q, W_k=W_k, W_v=W_v)
        out.append(Probe(args, label=text))
        pad = rng(60 + seed).random((*h[:-2], 1, h[-2])) < 0.6
        pad[..., 0] = True
        out.append(Probe(args, {"mask": pad}, text + ", " + label(mask=pad)))
        holes = rng(65 + seed).random((*y[:-2], y[-2], h[-2])) < 0.6  # (..., m, n)
        holes[..., 0, :] = False  # query 0 may attend to nothing: zeros, never NaN
        holes[..., -1, 0] = True
        out.append(Probe(args, {"mask": holes}, f"{text}, {label(mask=holes)} (row 0 empty)"))
    return [*out, _empty_source_probe(), float32(out[-1]), *_far_cross_probes()]


def _empty_source_probe() -> Probe:
    """A batch whose second source sentence has length 0: its queries see no key at all."""
    Y, H, W_q, W_k, W_v = normal(68, (2, 3, 4), (2, 5, 6), (4, 3), (6, 3), (6, 2))
    pad = ref.padding_mask(np.array([5, 0]), 5)  # (B, 1, n)
    text = label(Y=Y, H=H, W_q=W_q, W_k=W_k, W_v=W_v, mask=pad)
    return Probe((Y, H, W_q, W_k, W_v), {"mask": pad}, f"{text} (source lengths [5, 0])")


def _far_cross_probes() -> list[Probe]:
    """Y = H = I, so that Q = W_q and K = W_k give scores near ±1000 (see probes.far_qk)."""
    W_q, W_k = far_qk()  # (5, 2) each
    Y, H = np.eye(5), np.eye(5)
    (W_v,) = normal(69, (5, 3))
    text = "Y = H = I (5, 5), W_q (5, 2), W_k (5, 2), W_v (5, 3) with scores near ±1000"
    masked = far((Y, H, W_q, W_k, W_v), {"mask": far_mask()}, f"{text}, mask (5, 5)")
    return [far((Y, H, W_q, W_k, W_v), text=text), masked, float32(masked)]


cross_attention = Exercise(
    name="cross_attention",
    lesson=LESSON,
    read="03-self-cross, 'Cross-attention: the decoder reads the encoder'",
    reference=ref.cross_attention,
    probes=_cross_probes,
    outputs=("output", "weights"),
    mistakes=(
        Mistake(
            "keys and values come from Y: in cross-attention the queries come from the "
            "decoder Y and the keys and values from the encoder H",
            lambda Y, H, q, k, v, mask=None: ref.attention(Y @ q, Y @ k, Y @ v, None),
        ),
        Mistake(
            "the values come from Y: keys and values both come from the encoder H",
            lambda Y, H, q, k, v, mask=None: ref.attention(Y @ q, H @ k, Y @ v, mask),
        ),
        *masking_mistakes(
            lambda Y, H, q, k, v: ref.scaled_dot_scores(Y @ q, H @ k),
            lambda a, w: (w @ (a[1] @ a[4]), w),
        ),
    ),
    invariants=weights_invariants(1),
)


def _hard_probes() -> list[Probe]:
    out = []
    Q, K, V = normal(70, (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))
    out.append(Probe((Q, K, V), label=label(Q=Q, K=K, V=V)))
    mask = rng(71).random((2, 1, 5, 7)) < 0.5
    mask[..., 0, :] = False  # a query with no allowed key
    mask[..., 1, :] = True
    out.append(Probe((Q, K, V), {"mask": mask}, label(Q=Q, K=K, V=V, mask=mask)))
    ties = np.ones((3, 2))  # every key scores the same: the first must win
    out.append(Probe((np.ones((2, 2)), ties, np.eye(3)), label="identical keys (a tie)"))
    return [*out, float32(out[1]), *far_qkv_probes()]


def _hard_variant(pick):
    def returns(Q, K, V, mask=None):
        scores = ref.scaled_dot_scores(Q, K)
        allowed = (
            np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
        )
        w = pick(np.where(allowed, scores, -np.inf), allowed)
        return w @ V, w

    return returns


def _one_hot(index, shape):
    w = np.zeros(shape)
    np.put_along_axis(w, index[..., None], 1.0, axis=-1)
    return w


def _one_hot_over_queries(index, shape):
    w = np.zeros(shape)
    np.put_along_axis(w, index[..., None, :], 1.0, axis=-2)
    return w


hard_attention = Exercise(
    name="hard_attention",
    lesson=LESSON,
    read="03-self-cross, 'Hard versus soft attention'",
    reference=ref.hard_attention,
    probes=_hard_probes,
    outputs=("output", "weights"),
    hints=(transposed_key,),
    mistakes=(
        Mistake(
            "returns soft weights; hard attention puts all the weight (1.0) on one key",
            _hard_variant(lambda s, a: ref.masked_softmax(np.where(a, s, 0), a)),
        ),
        Mistake(
            "ties go to the last index; they must go to the first (np.argmax does that)",
            _hard_variant(
                lambda s, a: (
                    _one_hot(s.shape[-1] - 1 - np.argmax(s[..., ::-1], -1), s.shape)
                    * a.any(-1, keepdims=True)
                )
            ),
        ),
        Mistake(
            "every key tied for the best score gets weight 1; hard attention picks one key, the "
            "first of them (np.argmax does that)",
            _hard_variant(lambda s, a: ((s == s.max(-1, keepdims=True)) & a).astype(float)),
        ),
        Mistake(
            "a query with no allowed key must get all-zero weights and a zero output",
            _hard_variant(lambda s, a: _one_hot(np.argmax(s, -1), s.shape)),
        ),
        Mistake(
            "the argmax is taken over queries (axis -2), not over keys (the last axis)",
            _hard_variant(lambda s, a: _one_hot_over_queries(np.argmax(s, -2), s.shape)),
        ),
    ),
    invariants=weights_invariants(1),
)


def _sinusoid(T, d, *, first=np.sin, second=np.cos, pair=2, interleave=True, invert=False):
    p = np.arange(T)[:, None]
    i = np.arange(0, d, 2)
    freq = 10000.0 ** ((i if pair == 2 else i // 2) / d)
    angle = p * freq if invert else p / freq
    if not interleave:
        return np.concatenate([first(angle), second(angle[:, : d // 2])], axis=1)
    pe = np.empty((T, d))
    pe[:, 0::2] = first(angle)
    pe[:, 1::2] = second(angle[:, : d // 2])
    return pe


def _sinusoid_by_column(T, d):
    """Each column's own index in the frequency: the cosine of pair i gets (2i+1)/d."""
    column = np.arange(d)  # (d,)
    angle = np.arange(T)[:, None] / 10000.0 ** (column / d)  # (T, d)
    return np.where(column % 2 == 0, np.sin(angle), np.cos(angle))


sinusoidal_encoding = Exercise(
    name="sinusoidal_encoding",
    lesson=LESSON,
    read="03-self-cross, 'Giving attention a sense of order'",
    reference=ref.sinusoidal_encoding,
    probes=lambda: [
        Probe((T, d), label=f"T={T}, d_model={d}") for T, d in ((6, 8), (10, 16), (3, 6), (1, 4))
    ],
    mistakes=(
        Mistake(
            "sine and cosine are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos",
            lambda T, d: _sinusoid(T, d, first=np.cos, second=np.sin),
        ),
        Mistake(
            "sines and cosines are concatenated; interleave them: PE[p, 2i] = sin, "
            "PE[p, 2i+1] = cos",
            lambda T, d: _sinusoid(T, d, interleave=False),
        ),
        Mistake(
            "the frequency uses i/d_model where the formula has 2i/d_model (the column index "
            "of the pair's sine)",
            lambda T, d: _sinusoid(T, d, pair=1),
        ),
        Mistake(
            "the cosine columns use their own index in the frequency: column 2i+1 shares the "
            "frequency of column 2i, 1 / 10000^(2i/d_model)",
            _sinusoid_by_column,
        ),
        Mistake(
            "positions start at 1; the first position is p = 0, whose sines are 0 and cosines 1",
            lambda T, d: _sinusoid(T + 1, d)[1:],
        ),
        Mistake(
            "positions are multiplied by 10000^(2i/d_model); divide by it",
            lambda T, d: _sinusoid(T, d, invert=True),
        ),
    ),
)

EXERCISES = (self_attention, cross_attention, hard_attention, sinusoidal_encoding)
