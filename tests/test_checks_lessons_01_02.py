"""attnlib.checks separates correct answers, however written, from classic mistakes.

Each buggy implementation below is a mistake learners really make; each
correct one is written differently from the reference (loops, einsum,
log-sum-exp, -inf with nan_to_num). The checks must pass every correct one and
fail every buggy one with a sentence that names the bug.
"""

import math
import warnings

import numpy as np
import pytest

import attnlib.checks as checks

# --- correct answers written differently ---------------------------------------------------


def dot_einsum(Q, K):
    return np.einsum("...md,...nd->...mn", Q, K)


def scaled_loop(Q, K):
    Q, K = np.broadcast_arrays(Q[..., :, None, :], K[..., None, :, :])
    return (Q * K).sum(-1) / np.sqrt(Q.shape[-1])


def additive_loop(Q, K, W_q, W_k, v):
    q = Q @ W_q
    k = K @ W_k
    out = np.zeros(np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (Q.shape[-2], K.shape[-2]))
    for i in range(Q.shape[-2]):
        for j in range(K.shape[-2]):
            out[..., i, j] = np.tanh(q[..., i, :] + k[..., j, :]) @ v
    return out


def cosine_where(Q, K, eps=1e-8):
    qn = np.linalg.norm(Q, axis=-1, keepdims=True)
    kn = np.linalg.norm(K, axis=-1, keepdims=True)
    Qu = np.where(qn > eps, Q / np.where(qn > eps, qn, 1), 0)
    Ku = np.where(kn > eps, K / np.where(kn > eps, kn, 1), 0)
    return Qu @ np.swapaxes(Ku, -1, -2)


def softmax_logsumexp(x, axis=-1):
    x = np.asarray(x, dtype=float)
    top = np.max(x, axis=axis, keepdims=True)
    lse = top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))
    return np.exp(x - lse)


def causal_loop(T):
    mask = np.zeros((T, T), dtype=bool)
    for i in range(T):
        mask[i, : i + 1] = True
    return mask


def padding_compare(lengths, max_len):
    return np.arange(max_len)[None, None, :] < np.asarray(lengths)[:, None, None]


def masked_softmax_nan_to_num(scores, mask=None):
    """-inf then nan_to_num: prints RuntimeWarnings for fully masked rows, still correct."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return np.nan_to_num(e / e.sum(axis=-1, keepdims=True))


def attention_einsum(Q, K, V, mask=None):
    scores = np.einsum("...md,...nd->...mn", Q, K) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(all="ignore"):
        w = np.nan_to_num(softmax_logsumexp(scores))
    return np.einsum("...mn,...nd->...md", w, V), w


CORRECT = [
    ("dot_scores", dot_einsum),
    ("scaled_dot_scores", scaled_loop),
    ("additive_scores", additive_loop),
    ("cosine_scores", cosine_where),
    ("softmax", softmax_logsumexp),
    ("causal_mask", causal_loop),
    ("padding_mask", padding_compare),
    ("masked_softmax", masked_softmax_nan_to_num),
    ("attention", attention_einsum),
]


@pytest.mark.parametrize(("name", "fn"), CORRECT, ids=[n for n, _ in CORRECT])
def test_correct_answers_written_differently_pass(name, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = checks.check(name, fn)
    assert outcome.passed, outcome.feedback()


# --- classic mistakes ------------------------------------------------------------------------


def _softmax_rows(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attn(Q, K, V, mask=None, scale=None, axis=-1, values=None, fill=-np.inf, after=False):
    d = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / (math.sqrt(d) if scale is None else scale)
    if mask is not None and not after:
        scores = np.where(mask, scores, fill)
    with np.errstate(all="ignore"):
        w = _softmax_rows(scores, axis)
    if mask is not None and after:
        w = w * mask
    w = np.nan_to_num(w) if fill == -np.inf else w
    return w @ (V if values is None else values(K, V)), w


def _adding_the_mask(Q, K, V, mask=None):
    """Adds the boolean mask to the scores, as if it were an additive (0 / −inf) one."""
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., m, n)
    w = _softmax_rows(scores if mask is None else scores + mask)
    return w @ V, w


BUGGY = [
    ("dot_scores", lambda Q, K: K @ np.swapaxes(Q, -1, -2), "transposed"),
    (
        "dot_scores",
        lambda Q, K: Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1]),
        "divides by sqrt(d_k)",
    ),
    ("dot_scores", lambda Q, K: Q @ K.T, "raised ValueError"),
    ("dot_scores", lambda Q, K: Q @ K.T, "swap only the last two"),
    ("dot_scores", lambda Q, K: np.dot(Q, np.swapaxes(K, -1, -2)), "np.dot"),
    ("dot_scores", lambda Q, K: np.einsum("md,nd->mn", Q, K), "'...md,...nd->...mn'"),
    ("scaled_dot_scores", lambda Q, K: Q @ np.swapaxes(K, -1, -2), "not scaled"),
    (
        "scaled_dot_scores",
        lambda Q, K: Q @ np.swapaxes(K, -1, -2) / Q.shape[-1],
        "scaled by d_k instead of sqrt(d_k)",
    ),
    (
        "scaled_dot_scores",
        lambda Q, K: Q @ np.swapaxes(K, -1, -2) / math.sqrt(K.shape[-2]),
        "number of keys n",
    ),
    (
        "scaled_dot_scores",
        lambda Q, K: Q @ np.swapaxes(K, -1, -2) * math.sqrt(Q.shape[-1]),
        "multiplied by sqrt(d_k)",
    ),
    (
        "scaled_dot_scores",
        lambda Q, K: (K @ np.swapaxes(Q, -1, -2)) / math.sqrt(Q.shape[-1]),
        "transposed",
    ),
    (
        "additive_scores",
        lambda Q, K, W_q, W_k, v: ((Q @ W_q)[..., :, None, :] + (K @ W_k)[..., None, :, :]) @ v,
        "tanh is missing",
    ),
    (
        "additive_scores",
        lambda Q, K, W_q, W_k, v: np.tanh(
            ((Q @ W_q)[..., :, None, :] + (K @ W_k)[..., None, :, :]) @ v
        ),
        "tanh is applied after",
    ),
    (
        "additive_scores",
        lambda Q, K, W_q, W_k, v: np.tanh(Q @ W_q + K @ W_k) @ v,
        "every query meets every key",
    ),
    (
        "additive_scores",
        lambda Q, K, W_q, W_k, v: (
            np.tanh((Q @ W_k)[..., :, None, :] + (K @ W_q)[..., None, :, :]) @ v
        ),
        "Q (..., m, d_q) goes through W_q (d_q, h)",
    ),
    ("cosine_scores", lambda Q, K, eps=1e-8: Q @ np.swapaxes(K, -1, -2), "not normalised"),
    (
        "cosine_scores",
        lambda Q, K, eps=1e-8: (
            (Q / np.linalg.norm(Q, axis=-1, keepdims=True))
            @ np.swapaxes(K / np.linalg.norm(K, axis=-1, keepdims=True), -1, -2)
        ),
        "zero vector gives NaN",
    ),
    (
        "cosine_scores",
        lambda Q, K, eps=1e-8: (
            (Q @ np.swapaxes(K, -1, -2))
            / (
                np.linalg.norm(Q, axis=-1)[..., :, None] * np.linalg.norm(K, axis=-1)[..., None, :]
                + eps
            )
        ),
        "eps is added to |q| |k|",
    ),
    ("softmax", lambda x, axis=-1: _softmax_rows(x, -1), "ignores its axis argument"),
    ("softmax", lambda x, axis=-1: _softmax_rows(x, 0), "over the first axis"),
    (
        "softmax",
        lambda x, axis=-1: (
            np.exp(x - x.max(axis, keepdims=True))
            / np.exp(x - x.max(axis, keepdims=True)).sum(axis)
        ),
        "keep it with keepdims=True",
    ),
    (
        "softmax",
        lambda x, axis=-1: np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True),
        "subtract each slice's own maximum",
    ),
    (
        "softmax",
        lambda x, axis=-1: np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis, keepdims=True),
        "subtract each slice's own maximum",
    ),
    ("causal_mask", lambda T: np.triu(np.ones((T, T), dtype=bool), 1), "inverted"),
    ("causal_mask", lambda T: np.triu(np.ones((T, T), dtype=bool)), "transposed"),
    ("causal_mask", lambda T: np.tril(np.ones((T, T), dtype=bool), -1), "diagonal is masked"),
    ("causal_mask", lambda T: np.tril(np.ones((T, T))), "returns a float64 mask"),
    ("causal_mask", lambda T: ~np.tril(np.ones((T, T), dtype=bool)), "inverted"),
    ("padding_mask", lambda L, n: np.arange(n) < np.asarray(L)[:, None], "no query axis"),
    (
        "padding_mask",
        lambda L, n: (np.arange(n) < np.asarray(L)[:, None])[:, :, None],
        "applied to queries",
    ),
    ("padding_mask", lambda L, n: (np.arange(n) >= np.asarray(L)[:, None])[:, None], "inverted"),
    ("padding_mask", lambda L, n: (np.arange(n) <= np.asarray(L)[:, None])[:, None], "off by one"),
    ("masked_softmax", lambda s, mask=None: _softmax_rows(s), "mask is ignored"),
    (
        "masked_softmax",
        lambda s, mask=None: _softmax_rows(s) * (1 if mask is None else mask),
        "applied after softmax",
    ),
    (
        "masked_softmax",
        lambda s, mask=None: _softmax_rows(s if mask is None else np.where(mask, s, -1e9)),
        "uniform weights 1/n",
    ),
    (
        "masked_softmax",
        lambda s, mask=None: _softmax_rows(s if mask is None else np.where(mask, s, -np.inf)),
        "fully masked row gives NaN",
    ),
    (
        "masked_softmax",
        lambda s, mask=None: _softmax_rows(s if mask is None else np.where(mask, -np.inf, s)),
        "inverted",
    ),
    (
        "masked_softmax",
        lambda s, mask=None: np.nan_to_num(
            _softmax_rows(s if mask is None else np.where(mask, s, -np.inf), axis=-2)
        ),
        "over queries (axis -2)",
    ),
    ("attention", lambda Q, K, V, mask=None: _attn(Q, K, V, mask, scale=1.0), "not scaled"),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, scale=Q.shape[-1]),
        "scaled by d_k instead of sqrt(d_k)",
    ),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, scale=math.sqrt(K.shape[-2])),
        "number of keys n",
    ),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, scale=math.sqrt(V.shape[-1])),
        "sqrt(d_v) instead of sqrt(d_k)",
    ),
    ("attention", lambda Q, K, V, mask=None: _attn(Q, K, V, mask, axis=-2), "over queries"),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, values=lambda k, v: k),
        "keys as values",
    ),
    ("attention", lambda Q, K, V, mask=None: _attn(Q, K, V, mask, fill=-1e9), "uniform weights"),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, after=True),
        "applied after softmax",
    ),
    ("attention", lambda Q, K, V, mask=None: _attn(Q, K, V, None), "mask is ignored"),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask, fill=0.0),
        "0 is an ordinary score",
    ),
    (
        "masked_softmax",
        lambda s, mask=None: _softmax_rows(s * (1 if mask is None else mask)),
        "0 is an ordinary score",
    ),
    ("attention", _adding_the_mask, "added to the scores"),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask)[::-1],
        "returns (weights, output)",
    ),
    (
        "attention",
        lambda Q, K, V, mask=None: _attn(Q, K, V, mask)[0],
        "should return (output, weights)",
    ),
]


@pytest.mark.parametrize(("name", "fn", "expected"), BUGGY, ids=[f"{n}-{e}" for n, _, e in BUGGY])
def test_classic_mistakes_fail_with_a_sentence_that_names_them(name, fn, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = checks.check(name, fn)
    assert not outcome.passed
    assert expected in outcome.message, outcome.feedback()
    assert outcome.read.startswith(("01-scoring", "02-softmax-masking"))


def test_a_leaking_mask_is_reported_with_its_place_and_weight():
    def leaky(scores, mask=None):  # forgets the mask on the first query row only
        w = checks.EXERCISES["masked_softmax"].reference(scores, mask)
        if mask is not None:
            w = w.copy()
            w[..., 0, :] = _softmax_rows(scores[..., 0, :])
        return w

    outcome = checks.check("masked_softmax", leaky)
    assert not outcome.passed
    assert "masked key receives weight" in outcome.message
    assert "(b=" in outcome.message or "(i=" in outcome.message


def test_an_ndarray_subclass_that_lies_about_equality_gains_nothing():
    class Liar(np.ndarray):
        def __eq__(self, other):
            return np.ones(np.shape(self), dtype=bool)

        def all(self, *args, **kwargs):
            return True

    def cheat(Q, K):
        return np.zeros((1, 1)).view(Liar)

    outcome = checks.check("dot_scores", cheat)
    assert not outcome.passed
    assert "shape" in outcome.message


def test_mutating_the_inputs_is_reported():
    def in_place(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=axis, keepdims=True)
        return x

    outcome = checks.check("softmax", in_place)
    assert not outcome.passed and "in place" in outcome.message


def test_unknown_exercise_and_non_function_are_clear():
    with pytest.raises(ValueError, match="no checks for 'atention'"):
        checks.check("atention", print)
    assert "is not a function" in checks.check("softmax", 3).message
    with pytest.raises(checks.CheckFailed, match="softmax: "):
        checks.assert_correct("softmax", lambda x, axis=-1: x)


def test_a_wrong_boolean_mask_of_the_right_shape_is_described_not_crashed_on():
    def shifted(T):  # right shape and dtype, wrong values, no classic mistake
        return np.roll(np.tril(np.ones((T, T), dtype=bool)), 1, axis=1)

    outcome = checks.check("causal_mask", shifted)
    assert not outcome.passed
    assert "expected" in outcome.message and "TypeError" not in outcome.message
