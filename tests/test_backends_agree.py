"""attnlib.numpy and attnlib.torch give the same answers to every contract function.

Random shapes (hypothesis) with batch axes that broadcast, masks with fully masked rows, and
float64 on both sides, so any difference beyond 1e-12 is a real disagreement.
"""

import inspect

import numpy as np
import pytest
import torch
from contract import LESSON06, NAMES, SHARED_EXTRAS
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, qkv_shapes, random_mask

import attnlib.numpy as an
import attnlib.torch as at

TOL = {"rtol": 1e-12, "atol": 1e-12}
FAST = settings(max_examples=25, deadline=None)


def t(*arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def same(numpy_result, torch_result):
    if isinstance(numpy_result, tuple):
        assert len(numpy_result) == len(torch_result)
        for a, b in zip(numpy_result, torch_result, strict=True):
            same(a, b)
        return
    if isinstance(torch_result, torch.Tensor):
        torch_result = torch_result.detach().numpy()
    np.testing.assert_allclose(torch_result, numpy_result, **TOL)
    assert np.shape(torch_result) == np.shape(numpy_result)


@FAST
@given(shapes=qkv_shapes(), seed=SEEDS)
def test_scores(shapes, seed):
    Q, K, _ = normal(seed, *shapes)
    for name in ("dot_scores", "scaled_dot_scores", "cosine_scores"):
        same(getattr(an, name)(Q, K), getattr(at, name)(*t(Q, K)))


@FAST
@given(seed=SEEDS, m=st.integers(1, 5), n=st.integers(1, 5), h=st.integers(1, 4))
def test_additive_scores(seed, m, n, h):
    args = normal(seed, (2, m, 3), (2, n, 4), (3, h), (4, h), (h,))
    same(an.additive_scores(*args), at.additive_scores(*t(*args)))


def test_no_keys_at_all_gives_empty_weights_and_zero_outputs_in_both_like_sdpa():
    # n = 0: every query has no key to attend to, the convention's zeros, as PyTorch's SDPA does
    Q, K, V = np.ones((2, 3, 4)), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    empty = np.ones((2, 3, 0))  # (B, m, n) scores with no key
    same(an.softmax(empty), at.softmax(*t(empty)))
    same(an.masked_softmax(empty), at.masked_softmax(*t(empty)))
    out, weights = an.attention(Q, K, V)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 0)
    np.testing.assert_array_equal(out, 0.0)
    same((out, weights), at.attention(*t(Q, K, V)))
    sdpa = torch.nn.functional.scaled_dot_product_attention(*t(Q, K, V))
    same(out, sdpa)
    same(an.hard_attention(Q, K, V), at.hard_attention(*t(Q, K, V)))
    out, weights = an.sampled_hard_attention(Q, K, V, rng=0)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 0) and not out.any()


@FAST
@given(shapes=qkv_shapes(), seed=SEEDS, masked=st.booleans())
def test_softmax_and_attention(shapes, seed, masked):
    Q, K, V = normal(seed, *shapes, scale=3)
    mask = random_mask(seed, Q.shape[:-1] + (K.shape[-2],)) if masked else None
    tm = None if mask is None else torch.from_numpy(mask)
    scores = an.scaled_dot_scores(Q, K)
    same(an.softmax(scores, axis=0), at.softmax(*t(scores), axis=0))
    same(an.masked_softmax(scores, mask), at.masked_softmax(*t(scores), tm))
    same(an.attention(Q, K, V, mask), at.attention(*t(Q, K, V), tm))
    same(an.attention(Q, K, V, mask)[0], at.attention(*t(Q, K, V), tm, need_weights=False)[0])
    same(an.hard_attention(Q, K, V, mask), at.hard_attention(*t(Q, K, V), tm))


@FAST
@given(shapes=qkv_shapes(max_len=12), seed=SEEDS, block=st.integers(1, 13), causal=st.booleans())
def test_chunked_attention(shapes, seed, block, causal):
    Q, K, V = normal(seed, *shapes, scale=3)
    same(
        an.chunked_attention(Q, K, V, block_size=block, causal=causal),
        at.chunked_attention(*t(Q, K, V), block_size=block, causal=causal),
    )


@FAST
@given(seed=SEEDS, T=st.integers(1, 6), causal=st.booleans())
def test_self_and_cross_attention(seed, T, causal):
    X, Y, W_q, W_k, W_v = normal(seed, (2, T, 5), (2, 3, 5), (5, 4), (5, 4), (5, 3))
    mask = an.causal_mask(T) if causal else None
    tm = None if mask is None else torch.from_numpy(mask)
    same(an.self_attention(X, W_q, W_k, W_v, mask), at.self_attention(*t(X, W_q, W_k, W_v), tm))
    pad = an.padding_mask([T, 1], T)
    same(
        an.cross_attention(Y, X, W_q, W_k, W_v, pad),
        at.cross_attention(*t(Y, X, W_q, W_k, W_v), torch.from_numpy(pad)),
    )


@FAST
@given(seed=SEEDS, B=st.integers(1, 3), T=st.integers(1, 5), h=st.integers(1, 4))
def test_heads_and_multi_head_attention(seed, B, T, h):
    d = 2 * h
    X, W_q, W_k, W_v, W_o = normal(seed, (B, T, 6), (6, d), (6, d), (6, d), (d, 6))
    same(an.split_heads(X @ W_q, h), at.split_heads(*t(X @ W_q), h))
    same(an.merge_heads(an.split_heads(X, 2)), at.merge_heads(at.split_heads(*t(X), 2)))
    pad = an.padding_mask(np.arange(B) % T + 1, T)  # (B, 1, T), shared by the heads
    same(
        an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, h, pad),
        at.multi_head_attention(*t(X, X, W_q, W_k, W_v, W_o), h, torch.from_numpy(pad)),
    )


def test_masks_positions_and_costs():
    same(an.causal_mask(5), at.causal_mask(5))
    same(an.padding_mask([3, 0, 5], 5), at.padding_mask([3, 0, 5], 5))
    same(an.sinusoidal_encoding(7, 9), at.sinusoidal_encoding(7, 9, dtype=torch.float64))
    assert an.attention_flops(3, 5, 7, 11) == at.attention_flops(3, 5, 7, 11)
    assert an.score_matrix_bytes(2, 8, 64, 64, 4) == at.score_matrix_bytes(2, 8, 64, 64, 4)
    ns, times = [64, 128, 256], [1.0, 3.9, 16.5]
    assert an.fit_exponent(ns, times) == pytest.approx(at.fit_exponent(ns, times), rel=1e-12)
    kpm = np.array([[False, True, True], [False, False, False]])
    same(an.from_key_padding_mask(kpm), at.from_key_padding_mask(torch.from_numpy(kpm)))


@pytest.mark.parametrize(
    ("numpy_call", "torch_call"),
    [
        (lambda: an.attention(np.zeros((2, 5, 8)), np.zeros((2, 7, 6)), np.zeros((2, 7, 3))),
         lambda: at.attention(torch.zeros(2, 5, 8), torch.zeros(2, 7, 6), torch.zeros(2, 7, 3))),
        (lambda: an.masked_softmax(np.zeros((2, 5, 7)), np.ones((3, 5, 7), dtype=bool)),
         lambda: at.masked_softmax(torch.zeros(2, 5, 7), torch.ones(3, 5, 7, dtype=torch.bool))),
        (lambda: an.split_heads(np.zeros((2, 5, 10)), 3),
         lambda: at.split_heads(torch.zeros(2, 5, 10), 3)),
    ],
)  # fmt: skip
def test_both_backends_word_shape_errors_the_same(numpy_call, torch_call):
    with pytest.raises(ValueError) as from_numpy:
        numpy_call()
    with pytest.raises(ValueError) as from_torch:
        torch_call()
    assert str(from_numpy.value) == str(from_torch.value)


def test_both_backends_provide_the_contract_under_the_same_argument_names():
    for name in (*NAMES, *SHARED_EXTRAS, *LESSON06):
        numpy_args = list(inspect.signature(getattr(an, name)).parameters)
        torch_args = list(inspect.signature(getattr(at, name)).parameters)
        if name == "sampled_hard_attention":  # each library's own random source
            assert (numpy_args[-1], torch_args[-1]) == ("rng", "generator")
            numpy_args, torch_args = numpy_args[:-1], torch_args[:-1]
        # torch may add arguments of its own at the end (need_weights, dtype, device)
        assert torch_args[: len(numpy_args)] == numpy_args, (name, numpy_args, torch_args)
    assert set(an.__all__) == {*NAMES, *SHARED_EXTRAS, *LESSON06}
