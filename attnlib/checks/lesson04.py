"""Checks for lesson 04-multi-head: splitting heads and multi-head attention."""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as ref
from ..numpy.heads import head_mask
from ._core import Exercise, Mistake, Probe
from .probes import far, far_mask, far_qk, float32, label, normal
from .weights import masking_mistakes, weights_invariants

LESSON = "04-multi-head"

# (B, T, h, d): batch, length, heads and head width all different.
HEAD_SHAPES = ((2, 5, 3, 4), (1, 7, 2, 3), (3, 4, 4, 2), (2, 1, 1, 5))


def _split_probes() -> list[Probe]:
    out = []
    for seed, (B, T, h, d) in enumerate(HEAD_SHAPES):
        (X,) = normal(80 + seed, (B, T, h * d))
        out.append(Probe((X, h), label=label(X=X) + f", num_heads={h}"))
    return [*out, float32(out[0])]


split_heads = Exercise(
    name="split_heads",
    lesson=LESSON,
    read="04-multi-head, 'Splitting into heads'",
    reference=ref.split_heads,
    probes=_split_probes,
    mistakes=(
        Mistake(
            "reshape without transpose: (B, T, h*d) must become (B, T, h, d) and then have "
            "its T and h axes swapped; a direct reshape to (B, h, T, d) mixes positions",
            lambda X, h: X.reshape(X.shape[0], h, X.shape[1], X.shape[2] // h),
        ),
        Mistake(
            "head i takes every h-th column; it must own the contiguous columns i*d:(i+1)*d",
            lambda X, h: np.moveaxis(X.reshape(*X.shape[:2], X.shape[2] // h, h), -1, 1),
        ),
        Mistake(
            "the result is (B, T, h, d); swap the T and h axes to get (B, h, T, d)",
            lambda X, h: X.reshape(*X.shape[:2], h, X.shape[2] // h),
        ),
    ),
)


def _merge_probes() -> list[Probe]:
    out = []
    for seed, (B, T, h, d) in enumerate(HEAD_SHAPES):
        (X,) = normal(90 + seed, (B, h, T, d))
        out.append(Probe((X,), label=label(X=X)))
    return [*out, float32(out[0])]


merge_heads = Exercise(
    name="merge_heads",
    lesson=LESSON,
    read="04-multi-head, 'Splitting into heads'",
    reference=ref.merge_heads,
    probes=_merge_probes,
    mistakes=(
        Mistake(
            "reshape without transpose: swap the h and T axes back to (B, T, h, d) before "
            "reshaping to (B, T, h*d)",
            lambda X: X.reshape(X.shape[0], X.shape[2], -1),
        ),
    ),
)


def _mha_probes() -> list[Probe]:
    out = []
    d_model = 6
    for seed, (B, T, h, d) in enumerate(HEAD_SHAPES[:3]):
        T_kv = T + 2  # cross-attention: keys and values from a longer sequence
        X_q, X_kv, W_q, W_k, W_v, W_o = normal(
            100 + seed, (B, T, d_model), (B, T_kv, d_model), (d_model, h * d),
            (d_model, h * d), (d_model, h * d), (h * d, d_model),
        )  # fmt: skip
        args_self = (X_q, X_q, W_q, W_k, W_v, W_o, h)
        text = label(X=X_q, W_q=W_q, W_o=W_o) + f", num_heads={h}"
        out.append(Probe(args_self, label="self-attention, " + text))
        out.append(
            Probe(args_self, {"mask": ref.causal_mask(T)}, f"self-attention, {text}, causal mask")
        )
        pad = ref.padding_mask(np.arange(B) % T_kv + 1, T_kv)  # (B, 1, T_kv), no head axis
        args_cross = (X_q, X_kv, W_q, W_k, W_v, W_o, h)
        out.append(
            Probe(
                args_cross, {"mask": pad}, f"cross-attention, {label(X_q=X_q, X_kv=X_kv, mask=pad)}"
            )
        )
        per_head = np.ones((B, h, T, T), dtype=bool)  # (B, h, T, T): head 0 causal, others all
        per_head[:, 0] = ref.causal_mask(T)
        per_head[:, -1, 0] = False  # the last head's first query sees nothing: zeros, never NaN
        out.append(
            Probe(args_self, {"mask": per_head}, f"self-attention, {text}, {label(mask=per_head)}")
        )
        lengths = np.minimum(np.arange(B) * (T_kv - 1), T_kv)  # the first source has length 0
        empty = ref.padding_mask(lengths, T_kv)  # (B, 1, T_kv)
        out.append(
            Probe(
                args_cross,
                {"mask": empty},
                f"cross-attention, {label(X_q=X_q, X_kv=X_kv, mask=empty)} (source 0 empty)",
            )
        )
    return [*out, float32(out[2]), *_far_mha_probes()]


def _far_mha_probes() -> list[Probe]:
    """X = I, so that head 0's Q and K are columns 0:2 of W_q and W_k: scores near ±1000."""
    Q, K = far_qk()  # (5, 2) each
    X = np.eye(5)[None]  # (B=1, T=5, d_model=5)
    W_q, W_k, W_v, W_o = normal(105, (5, 4), (5, 4), (5, 4), (4, 5))
    W_q[:, :2], W_k[:, :2] = Q, K  # head 0 (d_head = 2)
    args = (X, X, W_q, W_k, W_v, W_o, 2)
    text = "self-attention, X = I (1, 5, 5), W_q (5, 4), num_heads=2, head 0 scores near ±1000"
    masked = far(args, {"mask": far_mask()}, f"{text}, mask (5, 5)")
    return [far(args, text=text), masked, float32(masked)]


def _head_scores(X_q, X_kv, W_q, W_k, W_v, W_o, h):
    """Each head's scaled scores, ``(B, h, T_q, T_kv)``."""
    return ref.scaled_dot_scores(ref.split_heads(X_q @ W_q, h), ref.split_heads(X_kv @ W_k, h))


def _heads_out(args, w):
    """The output of weights ``w (B, h, T_q, T_kv)``: heads merged, then W_o."""
    X_kv, W_v, W_o, h = args[1], args[4], args[5], args[6]
    return ref.merge_heads(w @ ref.split_heads(X_kv @ W_v, h)) @ W_o, w  # (B, T_q, d_model)


def _mha_variant(*, scale=None, project=True, split=None, merge=None):
    """Multi-head attention with one classic slip."""
    split = split or ref.split_heads
    merge = merge or ref.merge_heads

    def returns(X_q, X_kv, W_q, W_k, W_v, W_o, h, mask=None):
        Q, K, V = split(X_q @ W_q, h), split(X_kv @ W_k, h), split(X_kv @ W_v, h)
        if mask is not None:
            mask = head_mask(mask, Q.shape[:-1] + (K.shape[-2],))  # (B, 1|h, T_q, T_kv)
        d = Q.shape[-1] if scale is None else scale(X_q, W_q, h)
        w = ref.masked_softmax(ref.dot_scores(Q, K) / math.sqrt(d), mask)
        heads = merge(w @ V)  # (B, T_q, h*d_head)
        return (heads @ W_o if project else heads), w

    return returns


multi_head_attention = Exercise(
    name="multi_head_attention",
    depends=("split_heads", "merge_heads"),
    lesson=LESSON,
    read="04-multi-head, 'Multi-head attention, step by step'",
    reference=ref.multi_head_attention,
    probes=_mha_probes,
    outputs=("output", "weights"),
    mistakes=(
        Mistake(
            "the output projection W_o is missing: concatenate the heads, then multiply by W_o",
            _mha_variant(project=False),
        ),
        Mistake(
            "scores scaled by sqrt(d_model) instead of sqrt(d_head)",
            _mha_variant(scale=lambda X, W_q, h: X.shape[-1]),
        ),
        Mistake(
            "scores scaled by sqrt(h*d_head) (the projected width) instead of sqrt(d_head)",
            _mha_variant(scale=lambda X, W_q, h: W_q.shape[-1]),
        ),
        Mistake(
            "heads are split by reshape without transpose: (B, T, h*d) must become (B, T, h, d) "
            "and then (B, h, T, d)",
            _mha_variant(split=lambda X, h: X.reshape(X.shape[0], h, X.shape[1], -1)),
        ),
        Mistake(
            "the heads are merged by reshape without transpose: (B, h, T, d_head) must become "
            "(B, T, h, d_head) before (B, T, h*d_head)",
            _mha_variant(merge=lambda X: X.reshape(X.shape[0], X.shape[2], -1)),
        ),
        *masking_mistakes(_head_scores, _heads_out, mask_of=head_mask),
    ),
    invariants=weights_invariants(1),
)

EXERCISES = (split_heads, merge_heads, multi_head_attention)
