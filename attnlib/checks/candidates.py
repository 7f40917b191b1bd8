"""Attention functions, right and wrong, for judging a learner's property test.

Lesson 06's ``check_attention(attention_fn)`` must accept every correct attention, however it
is written, and catch the classic bugs, naming the property each breaks. These are the
functions it is judged on: :data:`CORRECT` (unusual but right) and :data:`BUGS` (name → the
buggy function and a pattern of the property :func:`attnlib.numpy.check_attention` names for
it). In the grader they stay on the trusted side; the learner's test calls them back.
"""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as an


def scores_of(Q, K, divisor=math.sqrt):
    """``Q Kᵀ / divisor(d_k)``."""
    return Q @ np.swapaxes(K, -1, -2) / divisor(Q.shape[-1])  # (..., m, n)


def plain_softmax(x, axis=-1):
    """Softmax as a first attempt writes it: NaN for a row of -inf."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def keep_or_all(mask, shape):
    return np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask, shape)


def allowed(mask):
    """The mask, or True (everything allowed) when there is none."""
    return True if mask is None else mask


# --- correct, in unusual ways


def explicit_loops(Q, K, V, mask=None):
    """One query and one key at a time, with math.exp: slow but correct."""
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    Q, K, V = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (Q, K, V))
    m, n = Q.shape[-2], K.shape[-2]
    out, weights = np.zeros(batch + (m, V.shape[-1])), np.zeros(batch + (m, n))
    keep = keep_or_all(mask, weights.shape)
    for b in np.ndindex(*batch):
        for i in range(m):
            allowed = [j for j in range(n) if keep[b + (i, j)]]
            s = {j: float(Q[b + (i,)] @ K[b + (j,)]) / math.sqrt(Q.shape[-1]) for j in allowed}
            if not s:
                continue
            top = max(s.values())
            z = sum(math.exp(x - top) for x in s.values())
            for j, x in s.items():
                weights[b + (i, j)] = math.exp(x - top) / z
            out[b + (i,)] = weights[b + (i,)] @ V[b]
    return out, weights


def float32_attention(Q, K, V, mask=None):
    return an.attention(*(np.asarray(a, dtype=np.float32) for a in (Q, K, V)), mask)


def minus_1e9_with_empty_rows_fixed(Q, K, V, mask=None):
    s = scores_of(Q, K)
    if mask is None:
        w = plain_softmax(s)
    else:
        w = plain_softmax(np.where(mask, s, -1e9)) * mask.any(axis=-1, keepdims=True)
    return w @ V, w


def zero_then_renormalise(Q, K, V, mask=None):
    """Softmax, zero the masked weights, divide by what is left: equivalent, if unusual."""
    w = plain_softmax(scores_of(Q, K)) * allowed(mask)
    total = w.sum(axis=-1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    return np.einsum("...mn,...nd->...md", w, V), w


def additive_minus_inf(Q, K, V, mask=None):
    s = scores_of(Q, K)
    if mask is not None:
        s = s + an.to_additive_mask(mask)  # 0 where allowed, -inf where not
    w = an.softmax(s)  # a row of -inf gives zeros
    return w @ V, w


CORRECT = {
    "reference": an.attention,
    "explicit loops": explicit_loops,
    "float32": float32_attention,
    "-1e9 with empty rows fixed": minus_1e9_with_empty_rows_fixed,
    "zero then renormalise, einsum": zero_then_renormalise,
    "additive -inf mask": additive_minus_inf,
    "returns a list": lambda Q, K, V, mask=None: list(an.attention(Q, K, V, mask)),
}


# --- buggy, each in one classic way


def from_weights(weights_of):
    """An attention whose weights are ``weights_of(Q, K, mask)`` and output ``weights @ V``."""

    def attention(Q, K, V, mask=None):
        w = weights_of(Q, K, mask)
        return w @ V, w

    return attention


def over_queries(Q, K, mask):
    s = scores_of(Q, K)
    return np.nan_to_num(plain_softmax(np.where(keep_or_all(mask, s.shape), s, -np.inf), -2))


def output_unnormalised(Q, K, V, mask=None):
    return np.exp(scores_of(Q, K)) @ V, an.attention(Q, K, V, mask)[1]


def output_ignores_mask(Q, K, V, mask=None):
    return an.softmax(scores_of(Q, K)) @ V, an.attention(Q, K, V, mask)[1]


def k_dot_t(Q, K, V, mask=None):
    w = an.masked_softmax(Q @ K.T / math.sqrt(Q.shape[-1]), mask)
    return w @ V, w


def np_dot(Q, K, V, mask=None):
    w = an.masked_softmax(scores_of(Q, K), mask)
    return np.dot(w, V), w


def first_mask_for_all(Q, K, mask):
    first = None if mask is None else mask.reshape(-1, *mask.shape[-2:])[0]  # batch entry 0
    return an.masked_softmax(scores_of(Q, K), first)


def weights_transposed(Q, K, V, mask=None):
    out, w = an.attention(Q, K, V, mask)
    return out, np.swapaxes(w, -1, -2)


BUGS = {
    "softmax over queries": (
        from_weights(over_queries),
        "rows of the weights sum to one over keys: the weights sum to one over queries",
    ),
    "mask ignored": (
        from_weights(lambda Q, K, m: an.softmax(scores_of(Q, K))),
        "masked keys get zero weight: .*the mask is ignored",
    ),
    "mask inverted": (
        from_weights(lambda Q, K, m: an.masked_softmax(scores_of(Q, K), None if m is None else ~m)),
        "masked keys get zero weight: .*inverted",
    ),
    "mask after softmax": (
        from_weights(lambda Q, K, m: an.softmax(scores_of(Q, K)) * allowed(m)),
        "rows of the weights sum to one over keys: with a mask",
    ),
    "scaled by d_k": (
        from_weights(lambda Q, K, m: an.masked_softmax(scores_of(Q, K, lambda d: d), m)),
        r"scaled by sqrt\(d_k\): the scores are divided by d_k instead of sqrt\(d_k\)",
    ),
    "unscaled": (
        from_weights(lambda Q, K, m: an.masked_softmax(scores_of(Q, K, lambda d: 1), m)),
        r"scaled by sqrt\(d_k\): the scores are not scaled",
    ),
    "output from unnormalised weights": (output_unnormalised, "output = weights @ V"),
    "output ignores the mask": (output_ignores_mask, "no future leakage under a causal mask"),
    "position bias": (
        from_weights(
            lambda Q, K, m: an.masked_softmax(scores_of(Q, K) + 0.5 * np.arange(K.shape[-2]), m)
        ),
        "permutation equivariance: reordering the keys",
    ),
    "NaN for fully masked rows": (
        from_weights(lambda Q, K, m: plain_softmax(np.where(allowed(m), scores_of(Q, K), -np.inf))),
        "fully masked rows give zeros, not NaN: .* NaN",
    ),
    "-1e9 gives uniform rows": (
        from_weights(lambda Q, K, m: plain_softmax(np.where(allowed(m), scores_of(Q, K), -1e9))),
        "fully masked rows give zeros, not NaN: .*uniform 1/n",
    ),
    "K.T": (k_dot_t, r"batch dimensions broadcast independently: .*not K\.T"),
    "np.dot": (np_dot, r"batch dimensions broadcast independently: the output has shape"),
    "one mask for every batch entry": (
        from_weights(first_mask_for_all),
        r"batch dimensions broadcast independently: .*mask \(2, 1, 1, 6\)",
    ),
    "returns only the output": (
        lambda Q, K, V, mask=None: an.attention(Q, K, V, mask)[0],
        r"returns \(output, weights\): attention_fn must return a pair",
    ),
    "weights transposed": (
        weights_transposed,
        r"returns \(output, weights\): the weights have shape \(5, 3\), expected \(3, 5\)",
    ),
}
