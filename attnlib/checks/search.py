"""Random problems for a property-based search, after the fixed probes pass.

The fixed probes catch the classic mistakes and name them; this search catches the rest. It
draws many problems — every axis from size 1 up, masks that broadcast and masks with empty
rows, large and tiny values — compares the learner's answer with the reference on each, and
when one differs lets hypothesis shrink it to the smallest problem that still fails, so the
feedback names a problem small enough to work by hand.

Queries and keys get batch axes that broadcast against each other (1 against 3) only for the
exercises whose lesson says they may: ``dot_scores`` ("the same leading axes, or axes that
broadcast"), ``scaled_dot_scores`` ("the same shapes as dot_scores") and ``attention``
("leading axes broadcast"). Everywhere else Q and K (Y and H) share their batch shape.

Lesson 06's functions are searched too (gradients, a decoding step, induction scores). Its
other exercises are not functions of arrays and have no search: ``CausalSelfAttention`` and
``RepairedBlock`` are module classes, compared with the course's module on fixed weights, and
``check_attention`` is a property test, judged by the planted bugs it catches
(:data:`NOT_SEARCHED`).

The search is derandomised: the same function always meets the same problems, independent of
any random state the learner set.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import numpy as ref
from ._core import Probe
from .probes import label

# Exercises whose lesson lets the batch axes of Q and K/V broadcast against each other.
BROADCASTS = frozenset({"dot_scores", "scaled_dot_scores", "attention"})

SEEDS = st.integers(0, 2**16)
SCALES = st.sampled_from([1.0, 0.01, 30.0])
SIZES = st.integers(1, 6)


def _arrays(seed: int, scale: float, *shapes) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    return [g.standard_normal(s) * scale for s in shapes]


@st.composite
def batch_axes(draw, max_axes: int = 2, broadcast: bool = True):
    """Two batch shapes: with ``broadcast``, ones that broadcast together (``(2, 3)`` against
    ``(1, 3)``, say); without, the same shape twice."""
    sizes = draw(st.lists(st.integers(1, 3), max_size=max_axes))
    first = tuple(sizes)
    if not broadcast:
        return first, first
    second = tuple(s if draw(st.booleans()) else 1 for s in sizes)
    return (first, second) if draw(st.booleans()) else (second, first)


@st.composite
def qk(draw, broadcast: bool = False):
    (bq, bk), m, n = draw(batch_axes(broadcast=broadcast)), draw(SIZES), draw(SIZES)
    d = draw(st.integers(1, 5))
    Q, K = _arrays(draw(SEEDS), draw(SCALES), (*bq, m, d), (*bk, n, d))
    return Probe((Q, K), label=label(Q=Q, K=K))


@st.composite
def additive(draw):
    (bq, bk), m, n = draw(batch_axes(broadcast=False)), draw(SIZES), draw(SIZES)
    dq, dk, h = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    args = _arrays(draw(SEEDS), draw(SCALES), (*bq, m, dq), (*bk, n, dk), (dq, h), (dk, h), (h,))
    return Probe(
        tuple(args), label=label(Q=args[0], K=args[1], W_q=args[2], W_k=args[3], v=args[4])
    )


@st.composite
def softmax_input(draw):
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = _arrays(draw(SEEDS), draw(st.sampled_from([1.0, 10.0, 300.0])), shape)
    return Probe((x,), {"axis": axis}, label(x=x) + f", axis={axis}")


def _within(draw, batch: tuple[int, ...]) -> tuple[int, ...]:
    """A batch shape that broadcasts to ``batch`` without growing it: some axes 1, some dropped."""
    kept = tuple(size if draw(st.booleans()) else 1 for size in batch)
    return kept[draw(st.integers(0, len(kept))) :]


def _mask(draw, shape) -> np.ndarray:
    g = np.random.default_rng(draw(SEEDS))
    return g.random(shape) < draw(st.sampled_from([0.3, 0.7, 1.0]))


@st.composite
def masked_scores(draw):
    b, m, n = draw(batch_axes())[0], draw(SIZES), draw(SIZES)
    (scores,) = _arrays(draw(SEEDS), draw(SCALES), (*b, m, n))
    if draw(st.booleans()):
        return Probe((scores,), label=label(scores=scores) + ", mask=None")
    mask = _mask(draw, (*_within(draw, b), draw(st.sampled_from([1, m])), n))
    return Probe((scores,), {"mask": mask}, label(scores=scores, mask=mask))


@st.composite
def qkv_masked(draw, broadcast: bool = False):
    (bq, bk), m, n = draw(batch_axes(broadcast=broadcast)), draw(SIZES), draw(SIZES)
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    Q, K, V = _arrays(draw(SEEDS), draw(SCALES), (*bq, m, d_k), (*bk, n, d_k), (*bk, n, d_v))
    text = label(Q=Q, K=K, V=V)
    if draw(st.booleans()):
        return Probe((Q, K, V), label=text)
    mask = _mask(draw, (draw(st.sampled_from([1, m])), n))
    return Probe((Q, K, V), {"mask": mask}, f"{text}, {label(mask=mask)}")


@st.composite
def self_input(draw):
    (b, _), T, d = draw(batch_axes()), draw(SIZES), draw(st.integers(1, 5))
    dk, dv = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    X, W_q, W_k, W_v = _arrays(draw(SEEDS), draw(SCALES), (*b, T, d), (d, dk), (d, dk), (d, dv))
    text = label(X=X, W_q=W_q, W_k=W_k, W_v=W_v)
    kind = draw(st.sampled_from(["none", "causal", "random"]))
    if kind == "none":
        return Probe((X, W_q, W_k, W_v), label=text)
    if kind == "causal":
        mask = np.tril(np.ones((T, T), dtype=bool))
        return Probe((X, W_q, W_k, W_v), {"mask": mask}, f"{text}, causal mask")
    mask = _mask(draw, (draw(st.sampled_from([1, T])), T))  # may leave a query no key at all
    return Probe((X, W_q, W_k, W_v), {"mask": mask}, f"{text}, {label(mask=mask)}")


@st.composite
def cross_input(draw):
    (by, bh), m, n = draw(batch_axes(broadcast=False)), draw(SIZES), draw(SIZES)
    dy, dh, dk, dv = (draw(st.integers(1, 4)) for _ in range(4))
    Y, H, W_q, W_k, W_v = _arrays(
        draw(SEEDS), draw(SCALES), (*by, m, dy), (*bh, n, dh), (dy, dk), (dh, dk), (dh, dv)
    )
    text = label(Y=Y, H=H, W_q=W_q, W_k=W_k, W_v=W_v)
    if draw(st.booleans()):
        return Probe((Y, H, W_q, W_k, W_v), label=text)
    mask = _mask(draw, (1, n))
    return Probe((Y, H, W_q, W_k, W_v), {"mask": mask}, f"{text}, {label(mask=mask)}")


@st.composite
def heads_input(draw):
    B, T, h, d = draw(st.integers(1, 3)), draw(SIZES), draw(st.integers(1, 4)), draw(SIZES)
    (X,) = _arrays(draw(SEEDS), 1.0, (B, T, h * d))
    return Probe((X, h), label=label(X=X) + f", num_heads={h}")


@st.composite
def merge_input(draw):
    B, T, h, d = draw(st.integers(1, 3)), draw(SIZES), draw(st.integers(1, 4)), draw(SIZES)
    (X,) = _arrays(draw(SEEDS), 1.0, (B, h, T, d))
    return Probe((X,), label=label(X=X))


@st.composite
def mha_input(draw):
    B, Tq, Tkv = draw(st.integers(1, 3)), draw(SIZES), draw(SIZES)
    h, d_head, d_model = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    X_q, X_kv, W_q, W_k, W_v, W_o = _arrays(
        draw(SEEDS), draw(SCALES), (B, Tq, d_model), (B, Tkv, d_model), (d_model, h * d_head),
        (d_model, h * d_head), (d_model, h * d_head), (h * d_head, d_model),
    )  # fmt: skip
    args = (X_q, X_kv, W_q, W_k, W_v, W_o, h)
    text = label(X_q=X_q, X_kv=X_kv, W_q=W_q) + f", num_heads={h}"
    shape = draw(st.sampled_from([None, (Tq, Tkv), (B, 1, Tkv), (B, h, Tq, Tkv)]))
    if shape is None:
        return Probe(args, label=text)
    mask = _mask(draw, shape)
    return Probe(args, {"mask": mask}, f"{text}, {label(mask=mask)}")


@st.composite
def chunked_input(draw):
    (bq, bk) = draw(batch_axes(broadcast=False))
    m, n = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    d = draw(st.integers(1, 4))
    Q, K, V = _arrays(draw(SEEDS), draw(SCALES), (*bq, m, d), (*bk, n, d), (*bk, n, d))
    block, causal = draw(st.integers(1, 10)), draw(st.booleans())
    text = label(Q=Q, K=K, V=V) + f", block_size={block}, causal={causal}"
    return Probe((Q, K, V, block), {"causal": causal}, text)


def ints(*names: str, low: int = 1, high: int = 12):
    """Probes of small positive integers, e.g. ``T`` for :func:`causal_mask`."""
    return st.tuples(*(st.integers(low, high) for _ in names)).map(
        lambda values: Probe(
            values, label=", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
        )
    )


@st.composite
def padding_input(draw):
    max_len = draw(st.integers(1, 9))
    lengths = np.array(draw(st.lists(st.integers(0, max_len), min_size=1, max_size=4)))
    return Probe((lengths, max_len), label=f"lengths={lengths.tolist()}, max_len={max_len}")


@st.composite
def fit_input(draw):
    k = draw(st.integers(2, 7))
    ns = np.array(
        sorted(draw(st.lists(st.integers(8, 10_000), min_size=k, max_size=k, unique=True)))
    )
    times = np.exp(np.random.default_rng(draw(SEEDS)).uniform(-8, 2, k))
    return Probe((ns.astype(float), times), label=f"ns={ns.tolist()}")


@st.composite
def softmax_backward_input(draw):
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    x, g = _arrays(draw(SEEDS), draw(st.sampled_from([1.0, 10.0])), shape, shape)
    y = ref.softmax(x, axis=axis)
    return Probe((y, g), {"axis": axis}, label(y=y, grad_y=g) + f", axis={axis}")


@st.composite
def attention_backward_input(draw):
    probe = draw(qkv_masked(broadcast=True))
    Q, K, V = probe.args
    out = (*np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2]), Q.shape[-2], V.shape[-1])
    (dO,) = _arrays(draw(SEEDS), 1.0, out)
    text = label(Q=Q, K=K, V=V, grad_out=dO)
    mask = probe.kwargs.get("mask")
    return Probe(
        (Q, K, V, dO), probe.kwargs, text if mask is None else f"{text}, {label(mask=mask)}"
    )


@st.composite
def cached_input(draw):
    B, h, t = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 6))
    d, d_v = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    seed, scale = draw(SEEDS), draw(SCALES)
    q, k, v, K, V = _arrays(
        seed, scale, *[(B, h, 1, d)] * 2, (B, h, 1, d_v), (B, h, t, d), (B, h, t, d_v)
    )
    text = label(q_t=q, k_t=k, v_t=v)
    if t == 0:
        return Probe((q, k, v), {"cache": None}, f"{text}, cache=None")
    return Probe((q, k, v), {"cache": (K, V)}, f"{text}, cache of {t} steps")


@st.composite
def induction_input(draw):
    heads = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))  # (..., h)
    T = draw(st.integers(2, 9))
    period = draw(st.integers(1, T - 1))
    (x,) = _arrays(draw(SEEDS), draw(SCALES), (*heads, T, T))
    weights = ref.masked_softmax(x, ref.causal_mask(T))  # (..., h, T, T): rows over the prefix
    return Probe((weights, period), label=label(weights=weights) + f", period={period}")


def _batched(strategy, name: str):
    """``strategy`` for exercise ``name``, with Q/K batch broadcasting where its lesson allows."""
    return lambda: strategy(broadcast=name in BROADCASTS)


STRATEGIES = {
    "dot_scores": _batched(qk, "dot_scores"),
    "scaled_dot_scores": _batched(qk, "scaled_dot_scores"),
    "cosine_scores": _batched(qk, "cosine_scores"),
    "additive_scores": additive,
    "softmax": softmax_input,
    "causal_mask": lambda: ints("T"),
    "padding_mask": padding_input,
    "masked_softmax": masked_scores,
    "attention": _batched(qkv_masked, "attention"),
    "self_attention": self_input,
    "cross_attention": cross_input,
    "hard_attention": _batched(qkv_masked, "hard_attention"),
    "sinusoidal_encoding": lambda: ints("T", "d_model", low=1, high=20),
    "split_heads": heads_input,
    "merge_heads": merge_input,
    "multi_head_attention": mha_input,
    "attention_flops": lambda: ints("m", "n", "d_k", "d_v", low=0, high=5000),
    "score_matrix_bytes": lambda: ints("batch", "heads", "m", "n", "itemsize", low=0, high=300),
    "chunked_attention": chunked_input,
    "fit_exponent": fit_input,
    "softmax_backward": softmax_backward_input,
    "attention_backward": attention_backward_input,
    "cached_attention": cached_input,
    "induction_score": induction_input,
}
# Exercises that are not functions of arrays, judged by their ``extra`` checks instead.
NOT_SEARCHED = frozenset({"CausalSelfAttention", "RepairedBlock", "check_attention"})
