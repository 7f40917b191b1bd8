"""attnlib.checks for lessons 03–05 (and lesson 06's classic mistakes): correct variants pass,
classic mistakes are named."""

import math
import warnings

import numpy as np
import pytest
from contract import CONTRACT, LESSON06, NAMES, TORCH_ONLY

import attnlib.checks as checks
import attnlib.numpy as an

# --- correct answers written differently ---------------------------------------------------


def self_fused(X, W_q, W_k, W_v, mask=None):
    """One fused projection, then split: the same thing as three projections."""
    qkv = X @ np.concatenate([W_q, W_k, W_v], axis=1)
    dk = W_q.shape[1]
    return an.attention(qkv[..., :dk], qkv[..., dk : 2 * dk], qkv[..., 2 * dk :], mask)


def cross_einsum(Y, H, W_q, W_k, W_v, mask=None):
    Q, K, V = Y @ W_q, H @ W_k, H @ W_v
    s = np.einsum("...md,...nd->...mn", Q, K) / math.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    with np.errstate(all="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        w = np.nan_to_num(e / e.sum(-1, keepdims=True))
    return np.einsum("...mn,...nd->...md", w, V), w


def hard_loop(Q, K, V, mask=None):
    scores = an.scaled_dot_scores(Q, K)
    allowed = np.broadcast_to(True if mask is None else mask, scores.shape)
    w = np.zeros(scores.shape)
    for idx in np.ndindex(scores.shape[:-1]):
        best = None
        for j in range(scores.shape[-1]):
            if allowed[idx + (j,)] and (best is None or scores[idx + (j,)] > scores[idx + (best,)]):
                best = j
        if best is not None:
            w[idx + (best,)] = 1.0
    return w @ V, w


def sinusoid_loop(T, d_model):
    pe = np.zeros((T, d_model))
    for p in range(T):
        for c in range(d_model):
            angle = p / 10000 ** ((c - c % 2) / d_model)
            pe[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return pe


def split_einops_style(X, num_heads):
    B, T, hd = X.shape
    return X.reshape(B, T, num_heads, hd // num_heads).transpose(0, 2, 1, 3)


def merge_concat(X):
    return np.concatenate([X[:, i] for i in range(X.shape[1])], axis=-1)


def mha_per_head_loop(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
    d = W_q.shape[1] // num_heads
    if mask is not None and np.ndim(mask) <= 3:
        mask = np.asarray(mask)[..., None, :, :]
    outs, weights = [], []
    for i in range(num_heads):
        cols = slice(i * d, (i + 1) * d)
        head_mask = (
            None
            if mask is None
            else np.broadcast_to(mask, (X_q.shape[0], num_heads, X_q.shape[1], X_kv.shape[1]))[:, i]
        )
        o, w = an.attention(X_q @ W_q[:, cols], X_kv @ W_k[:, cols], X_kv @ W_v[:, cols], head_mask)
        outs.append(o)
        weights.append(w)
    return np.concatenate(outs, -1) @ W_o, np.stack(weights, 1)


def chunked_two_pass(Q, K, V, block_size, causal=False):
    """Two passes over key blocks: first the row maxima and sums, then the outputs."""
    m, n = Q.shape[-2], K.shape[-2]
    scale = 1 / math.sqrt(Q.shape[-1])
    rows = np.arange(m)[:, None]

    def block(start):
        s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2) * scale
        if causal:
            s = np.where(np.arange(start, min(start + block_size, n)) <= rows, s, -np.inf)
        return s

    peak = np.full(np.broadcast_shapes(Q.shape[:-1], K.shape[:-2] + (1,)) + (1,), -np.inf)
    for start in range(0, n, block_size):
        peak = np.maximum(peak, block(start).max(-1, keepdims=True))
    total, acc = 0.0, 0.0
    for start in range(0, n, block_size):
        p = np.exp(block(start) - peak)
        total = total + p.sum(-1, keepdims=True)
        acc = acc + p @ V[..., start : start + block_size, :]
    return acc / total


def flops_by_parts(m, n, d_k, d_v):
    scores = m * n * (2 * d_k)
    weighted_sum = m * n * (2 * d_v)
    return scores + weighted_sum


def fit_lstsq(ns, times):
    A = np.stack([np.log(ns), np.ones(len(ns))], axis=1)
    return float(np.linalg.lstsq(A, np.log(times), rcond=None)[0][0])


CORRECT = [
    ("self_attention", self_fused),
    ("cross_attention", cross_einsum),
    ("hard_attention", hard_loop),
    ("sinusoidal_encoding", sinusoid_loop),
    ("split_heads", split_einops_style),
    ("merge_heads", merge_concat),
    ("multi_head_attention", mha_per_head_loop),
    ("attention_flops", flops_by_parts),
    ("score_matrix_bytes", lambda b, h, m, n, s: int(np.prod([b, h, m, n, s]))),
    ("chunked_attention", chunked_two_pass),
    ("fit_exponent", fit_lstsq),
]


@pytest.mark.parametrize(("name", "fn"), CORRECT, ids=[n for n, _ in CORRECT])
def test_correct_answers_written_differently_pass(name, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = checks.check(name, fn)
    assert outcome.passed, outcome.feedback()


# --- classic mistakes ------------------------------------------------------------------------


def naive_chunked(Q, K, V, block_size, causal=False):
    """Ignores block_size: materialises every score."""
    mask = np.tril(np.ones((Q.shape[-2], K.shape[-2]), bool)) if causal else None
    return an.attention(Q, K, V, mask)[0]


def no_rescale(Q, K, V, block_size, causal=False):
    n = K.shape[-2]
    total, acc, peak = 0.0, 0.0, -np.inf
    for start in range(0, n, block_size):
        s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2) / math.sqrt(Q.shape[-1])
        if causal:
            s = np.where(
                np.arange(start, min(start + block_size, n)) <= np.arange(Q.shape[-2])[:, None],
                s,
                -np.inf,
            )
        peak = np.maximum(peak, s.max(-1, keepdims=True))
        p = np.exp(s - peak)
        total = total + p.sum(-1, keepdims=True)
        acc = acc + p @ V[..., start : start + block_size, :]
    return acc / total


def sinusoid_by_column(T, d_model):
    """Every column's own index in the frequency: right for the sines, wrong for the cosines."""
    column = np.arange(d_model)  # (d_model,)
    angle = np.arange(T)[:, None] / 10000 ** (column / d_model)  # (T, d_model)
    return np.where(column % 2 == 0, np.sin(angle), np.cos(angle))


def mha_masked_after_softmax(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
    """Zeroes the masked weights of each head after its softmax."""
    out, w = an.multi_head_attention(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads)
    if mask is None:
        return out, w
    mask = np.asarray(mask)
    w = w * (mask[..., None, :, :] if mask.ndim <= 3 else mask)  # (B, h, T_q, T_kv)
    V = an.split_heads(X_kv @ W_v, num_heads)  # (B, h, T_kv, d_head)
    return an.merge_heads(w @ V) @ W_o, w


def mha_merged_by_reshape(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
    """Merges the heads' outputs (B, h, T, d) straight into (B, T, h*d)."""
    heads = [an.split_heads(X @ W, num_heads) for X, W in ((X_q, W_q), (X_kv, W_k), (X_kv, W_v))]
    if mask is not None and np.ndim(mask) <= 3:
        mask = np.asarray(mask)[..., None, :, :]  # (..., 1, T_q, T_kv): one mask for every head
    out, w = an.attention(*heads, mask)  # (B, h, T_q, d), (B, h, T_q, T_kv)
    return out.reshape(out.shape[0], out.shape[2], -1) @ W_o, w


def chunked_causal_strict(Q, K, V, block_size, causal=False):
    """A causal mask that also hides the diagonal: key j < i."""
    m, n = Q.shape[-2], K.shape[-2]
    mask = np.arange(n) < np.arange(m)[:, None] if causal else None  # (m, n)
    return an.attention(Q, K, V, mask)[0]


def hard_every_best_key(Q, K, V, mask=None):
    """Puts weight 1 on every key that ties for the best score."""
    scores = an.scaled_dot_scores(Q, K)  # (..., m, n)
    allowed = np.broadcast_to(True if mask is None else mask, scores.shape)
    scores = np.where(allowed, scores, -np.inf)
    w = ((scores == scores.max(-1, keepdims=True)) & allowed).astype(float)  # (..., m, n)
    return w @ V, w


def chunked_causal_from_the_end(Q, K, V, block_size, causal=False):
    """Aligns the causal mask at the last key (j <= i + n - m), as a KV cache does."""
    m, n = Q.shape[-2], K.shape[-2]
    mask = np.arange(n) <= np.arange(m)[:, None] + (n - m) if causal else None  # (m, n)
    return an.attention(Q, K, V, mask)[0]


BUGGY = [
    (
        "self_attention",
        lambda X, q, k, v, mask=None: an.attention(X @ q, X @ q, X @ v, mask),
        "projected with W_q",
    ),
    (
        "self_attention",
        lambda X, q, k, v, mask=None: an.attention(X @ q, X @ k, X, mask),
        "values are not projected",
    ),
    (
        "self_attention",
        lambda X, q, k, v, mask=None: an.attention(X @ q, X @ k, X @ v),
        "mask is ignored",
    ),
    (
        "cross_attention",
        lambda Y, H, q, k, v, mask=None: an.attention(Y @ q, Y @ k, Y @ v),
        "keys and values come from Y",
    ),
    (
        "cross_attention",
        lambda Y, H, q, k, v, mask=None: an.attention(Y @ q, H @ k, H @ v),
        "mask is ignored",
    ),
    ("hard_attention", lambda Q, K, V, mask=None: an.attention(Q, K, V, mask), "soft weights"),
    (
        "hard_attention",
        lambda Q, K, V, mask=None: (lambda w: (w @ V, w))(
            np.eye(K.shape[-2])[
                np.argmax(
                    np.where(True if mask is None else mask, an.scaled_dot_scores(Q, K), -np.inf),
                    -1,
                )
            ]
        ),
        "no allowed key",
    ),
    (
        "sinusoidal_encoding",
        lambda T, d: np.concatenate(
            [
                np.sin(np.arange(T)[:, None] / 10000 ** (np.arange(0, d, 2) / d)),
                np.cos(np.arange(T)[:, None] / 10000 ** (np.arange(0, d, 2) / d)),
            ],
            1,
        ),
        "concatenated",
    ),
    (
        "sinusoidal_encoding",
        lambda T, d: an.sinusoidal_encoding(T, d)[:, np.arange(d) ^ 1],
        "swapped",
    ),
    ("sinusoidal_encoding", sinusoid_by_column, "column 2i+1 shares the frequency of column 2i"),
    ("sinusoidal_encoding", lambda T, d: an.sinusoidal_encoding(T + 1, d)[1:], "p = 0"),
    ("hard_attention", hard_every_best_key, "every key tied for the best"),
    (
        "split_heads",
        lambda X, h: X.reshape(X.shape[0], h, X.shape[1], -1),
        "reshape without transpose",
    ),
    ("split_heads", lambda X, h: X.reshape(X.shape[0], X.shape[1], h, -1), "swap the T and h"),
    ("merge_heads", lambda X: X.reshape(X.shape[0], X.shape[2], -1), "reshape without transpose"),
    (
        "multi_head_attention",
        lambda Xq, Xkv, q, k, v, o, h, mask=None: mha_per_head_loop(
            Xq, Xkv, q, k, v, np.eye(o.shape[0]), h, mask
        ),
        "output projection W_o is missing",
    ),
    (
        "multi_head_attention",
        lambda Xq, Xkv, q, k, v, o, h, mask=None: an.multi_head_attention(
            Xq * math.sqrt(q.shape[1] // h / Xq.shape[-1]), Xkv, q, k, v, o, h, mask
        ),
        "sqrt(d_model) instead of sqrt(d_head)",
    ),
    (
        "multi_head_attention",
        lambda Xq, Xkv, q, k, v, o, h, mask=None: an.multi_head_attention(Xq, Xkv, q, k, v, o, h),
        "mask is ignored",
    ),
    ("multi_head_attention", mha_masked_after_softmax, "applied after softmax"),
    ("multi_head_attention", mha_merged_by_reshape, "merged by reshape without transpose"),
    ("attention_flops", lambda m, n, dk, dv: m * n * (dk + dv), "multiply-adds"),
    ("attention_flops", lambda m, n, dk, dv: 4 * m * n * dk, "uses d_k for both products"),
    ("attention_flops", lambda m, n, dk, dv: 2 * m * n * dk, "only Q Kᵀ"),
    ("score_matrix_bytes", lambda b, h, m, n, s: b * h * m * n, "counts elements, not bytes"),
    ("score_matrix_bytes", lambda b, h, m, n, s: b * m * n * s, "forgets the heads"),
    ("score_matrix_bytes", lambda b, h, m, n, s: b * h * m * m * s, "m queries by n keys"),
    ("score_matrix_bytes", lambda b, h, m, n, s: 8 * b * h * m * n * s, "counts bits"),
    ("score_matrix_bytes", lambda b, h, m, n, s: b * h * n * n * s, "m queries by n keys"),
    ("chunked_attention", no_rescale, "not rescaled"),
    ("chunked_attention", naive_chunked, "materialises the whole score matrix"),
    (
        "chunked_attention",
        lambda Q, K, V, bs, causal=False: an.chunked_attention(Q, K, V, bs),
        "causal=True is ignored",
    ),
    ("chunked_attention", chunked_causal_strict, "hides the diagonal"),
    ("chunked_attention", chunked_causal_from_the_end, "aligned at the last key"),
    ("fit_exponent", lambda ns, t: float(np.polyfit(ns, t, 1)[0]), "raw numbers"),
    (
        "fit_exponent",
        lambda ns, t: float(np.polyfit(np.log(t), np.log(ns), 1)[0]),
        "axes are swapped",
    ),
    (
        "fit_exponent",
        lambda ns, t: float(np.log(t[-1] / t[0]) / np.log(ns[-1] / ns[0])),
        "first and last points",
    ),
]


def cache_prepended(q_t, k_t, v_t, cache=None):
    """Puts the new step before the cached ones: the output is right, the cache is not."""
    K = k_t if cache is None else np.concatenate([k_t, cache[0]], axis=-2)  # (B, h, t+1, d)
    V = v_t if cache is None else np.concatenate([v_t, cache[1]], axis=-2)  # (B, h, t+1, d)
    return an.attention(q_t, K, V)[0], (K, V)


def backward_not_summed(Q, K, V, grad_out, mask=None):
    """The lesson's backward pass, every gradient left in the broadcast batch's shape."""
    scale = 1 / math.sqrt(Q.shape[-1])
    P = an.masked_softmax(Q @ np.swapaxes(K, -1, -2) * scale, mask)  # (..., m, n)
    dS = an.softmax_backward(P, grad_out @ np.swapaxes(V, -1, -2))  # (..., m, n)
    dV = np.swapaxes(P, -1, -2) @ grad_out  # (..., n, d_v)
    return (dS @ K) * scale, (np.swapaxes(dS, -1, -2) @ Q) * scale, dV


def induction_from_period_minus_one(weights, period):
    T = np.shape(weights)[-1]
    return np.mean([weights[..., i, i - period + 1] for i in range(period - 1, T)], axis=0)


BUGGY += [
    (
        "softmax_backward",
        lambda y, g, axis=-1: y * (g - np.sum(g, axis=axis, keepdims=True)),
        "weighted by the output",
    ),
    (
        "softmax_backward",
        lambda y, g, axis=-1: y * (g - np.sum(g * y, axis=axis)),
        "keep it with keepdims=True",
    ),
    ("attention_backward", backward_not_summed, "summed over the batch axes"),
    ("cached_attention", cache_prepended, "before the cached steps"),
    ("induction_score", induction_from_period_minus_one, "starts at query period − 1"),
]


@pytest.mark.parametrize(("name", "fn", "expected"), BUGGY, ids=[f"{n}-{e}" for n, _, e in BUGGY])
def test_classic_mistakes_fail_with_a_sentence_that_names_them(name, fn, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = checks.check(name, fn)
    assert not outcome.passed
    assert expected in outcome.message, outcome.feedback()
    # masking verdicts send every lesson back to where masking is taught
    assert outcome.read.startswith((checks.EXERCISES[name].lesson, "02-softmax-masking"))


# Lesson 06's exercises in the order the lesson sets them: the contract's functions of both
# backends, the torch-only module, and RepairedBlock, which repairs the lesson's own BuggyBlock
# (no library function: the course's block is attnlib.torch.gpt.Block).
EXERCISES06 = ("softmax_backward", "attention_backward", "CausalSelfAttention", "check_attention",
               "RepairedBlock", "cached_attention", "induction_score")  # fmt: skip


def test_every_contract_name_has_checks_and_the_reference_passes_them():
    assert set(EXERCISES06) == {*LESSON06, *TORCH_ONLY, "RepairedBlock"}
    assert sorted(checks.EXERCISES) == sorted(NAMES + EXERCISES06)
    for lesson, names in {**CONTRACT, "06-build-and-train": EXERCISES06}.items():
        assert [e.name for e in checks.LESSONS[lesson]] == list(names)
    for name in NAMES + LESSON06:
        assert checks.check(name, getattr(an, name)).passed, name


def test_the_course_s_modules_pass_the_module_exercises():
    pytest.importorskip("torch")
    import attnlib.torch as at
    from attnlib.torch.gpt import Block

    courses = {"CausalSelfAttention": at.CausalSelfAttention, "RepairedBlock": Block}
    assert set(courses) == {*TORCH_ONLY, "RepairedBlock"}
    for name, module in courses.items():
        outcome = checks.check(name, module)
        assert outcome.passed, outcome.feedback()


def test_torch_answers_are_converted_to_plain_arrays():
    torch = pytest.importorskip("torch")

    def torch_attention(Q, K, V, mask=None):
        t = [torch.as_tensor(a) for a in (Q, K, V)]
        m = None if mask is None else torch.as_tensor(mask)
        s = t[0] @ t[1].transpose(-1, -2) / math.sqrt(Q.shape[-1])
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        w = torch.nan_to_num(torch.softmax(s, -1))
        return w @ t[2], w

    outcome = checks.check("attention", torch_attention)
    assert outcome.passed, outcome.feedback()


def test_a_per_head_mask_is_not_given_a_second_head_axis():
    def always_insert_head_axis(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
        if mask is not None:
            mask = np.asarray(mask)[..., None, :, :]  # wrong for (B, h, T_q, T_kv) masks
        return mha_per_head_loop(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask)

    outcome = checks.check("multi_head_attention", always_insert_head_axis)
    assert not outcome.passed
    assert "(B, h, T_q, T_kv)" in outcome.message or "mask (" in outcome.message


def test_a_chunked_function_that_is_naive_only_when_causal_is_caught():
    def naive_when_causal(Q, K, V, block_size, causal=False):
        if causal:
            return naive_chunked(Q, K, V, block_size, causal=True)
        return an.chunked_attention(Q, K, V, block_size)

    outcome = checks.check("chunked_attention", naive_when_causal)
    assert not outcome.passed
    assert "causal=True" in outcome.message and "materialises" in outcome.message


def lets_exceptions_through(attention_fn):
    """A property test that never turns the tested function's exceptions into assertions."""
    Q = np.ones((2, 3, 4))  # (B, m, d_k) = (B, n, d_k): a batch, so `K.T` raises
    out, w = attention_fn(Q, Q, Q)
    assert np.shape(out) == (2, 3, 4), "returns (output, weights): wrong shape"


def calls_with_a_mask_of_the_wrong_shape(attention_fn):
    """Calls every attention, a correct one too, with inputs any attention refuses."""
    Q = np.ones((3, 4))  # (m, d_k) = (n, d_k)
    attention_fn(Q, Q, Q, np.ones((2, 2), dtype=bool))  # a (2, 2) mask for (3, 3) scores


@pytest.mark.lesson06
@pytest.mark.parametrize(
    ("test", "words"),
    [
        (calls_with_a_mask_of_the_wrong_shape,
         "calls a correct attention (reference) with inputs it refuses: ValueError: mask (2, 2) "
         "cannot broadcast"),
        (lets_exceptions_through,
         "lets the ValueError that attention_fn raised escape (matmul: "),
    ],
    ids=["calls a correct attention wrongly", "lets a broken one's exception escape"],
)  # fmt: skip
def test_a_property_test_whose_calls_raise_is_told_why(test, words):
    outcome = checks.check("check_attention", test)
    assert not outcome.passed
    assert words in outcome.message, outcome.feedback()
    if test is lets_exceptions_through:
        assert "raise an AssertionError naming the property" in outcome.message
