"""attnlib.numpy, lesson 03: self-, cross- and hard attention, positional encoding."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, random_mask

import attnlib.numpy as an

pytestmark = pytest.mark.lesson03


@settings(max_examples=40, deadline=None)
@given(
    seed=SEEDS, T=st.integers(1, 8), d=st.integers(1, 6), dk=st.integers(1, 6), dv=st.integers(1, 6)
)
def test_self_attention_is_attention_of_three_projections(seed, T, d, dk, dv):
    X, W_q, W_k, W_v = normal(seed, (2, T, d), (d, dk), (d, dk), (d, dv))
    out, w = an.self_attention(X, W_q, W_k, W_v)
    ref_out, ref_w = an.attention(X @ W_q, X @ W_k, X @ W_v)
    np.testing.assert_allclose(out, ref_out, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)
    # One fused projection, then split, is the same thing.
    qkv = X @ np.concatenate([W_q, W_k, W_v], axis=1)  # (2, T, 2*dk + dv)
    fused, _ = an.attention(qkv[..., :dk], qkv[..., dk : 2 * dk], qkv[..., 2 * dk :])
    np.testing.assert_allclose(out, fused, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, T=st.integers(2, 8), d=st.integers(1, 6))
def test_self_attention_is_permutation_equivariant(seed, T, d):
    X, W_q, W_k, W_v = normal(seed, (T, d), (d, 4), (d, 4), (d, 3))
    perm = np.random.default_rng(seed).permutation(T)
    out, w = an.self_attention(X, W_q, W_k, W_v)
    out_p, w_p = an.self_attention(X[perm], W_q, W_k, W_v)
    np.testing.assert_allclose(out_p, out[perm], atol=1e-12)
    np.testing.assert_allclose(w_p, w[perm][:, perm], atol=1e-12)


def test_positional_encoding_breaks_permutation_equivariance():
    T, d = 6, 8
    X, W_q, W_k, W_v = normal(7, (T, d), (d, 4), (d, 4), (d, 4))
    perm = np.array([1, 0, 2, 3, 4, 5])
    pe = an.sinusoidal_encoding(T, d)
    out, _ = an.self_attention(X + pe, W_q, W_k, W_v)
    out_p, _ = an.self_attention(X[perm] + pe, W_q, W_k, W_v)
    assert not np.allclose(out_p, out[perm], atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, T=st.integers(2, 8), d=st.integers(1, 6))
def test_causal_self_attention_never_sees_the_future(seed, T, d):
    X, W_q, W_k, W_v = normal(seed, (T, d), (d, 3), (d, 3), (d, 2))
    t = int(np.random.default_rng(seed).integers(0, T - 1))
    changed = X.copy()
    changed[t + 1 :] += 5.0  # rewrite the future of position t
    out, w = an.self_attention(X, W_q, W_k, W_v, an.causal_mask(T))
    out2, _ = an.self_attention(changed, W_q, W_k, W_v, an.causal_mask(T))
    np.testing.assert_allclose(out2[: t + 1], out[: t + 1], atol=1e-12)
    assert np.all(np.triu(w, k=1) == 0)


def test_encoder_decoder_shapes_from_the_lesson():
    B, L_src, L_tgt, d = 2, 4, 3, 8
    H, Y, W_q, W_k, W_v = normal(8, (B, L_src, d), (B, L_tgt, d), (d, d), (d, d), (d, d))
    enc, w_enc = an.self_attention(H, W_q, W_k, W_v)
    assert enc.shape == (B, L_src, d) and w_enc.shape == (B, L_src, L_src)
    dec, w_dec = an.self_attention(Y, W_q, W_k, W_v, an.causal_mask(L_tgt))
    assert dec.shape == (B, L_tgt, d) and w_dec.shape == (B, L_tgt, L_tgt)
    cross, w_cross = an.cross_attention(Y, H, W_q, W_k, W_v, an.padding_mask([4, 2], L_src))
    assert cross.shape == (B, L_tgt, d) and w_cross.shape == (B, L_tgt, L_src)
    assert (w_cross[1, :, 2:] == 0).all()
    np.testing.assert_allclose(w_cross.sum(-1), 1.0)


def test_cross_attention_takes_queries_from_y_and_keys_values_from_h():
    Y, H, W_q, W_k, W_v = normal(9, (3, 5), (4, 6), (5, 2), (6, 2), (6, 7))
    out, w = an.cross_attention(Y, H, W_q, W_k, W_v)
    ref_out, ref_w = an.attention(Y @ W_q, H @ W_k, H @ W_v)
    np.testing.assert_allclose(out, ref_out, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, m=st.integers(1, 6), n=st.integers(1, 6))
def test_hard_attention_puts_all_weight_on_the_best_allowed_key(seed, m, n):
    Q, K, V = normal(seed, (m, 4), (n, 4), (n, 3))
    mask = random_mask(seed, (m, n))
    out, w = an.hard_attention(Q, K, V, mask)
    scores = np.where(mask, an.scaled_dot_scores(Q, K), -np.inf)
    for i in range(m):
        if not mask[i].any():
            assert (w[i] == 0).all() and (out[i] == 0).all()
            continue
        j = int(np.argmax(scores[i]))
        expected = np.zeros(n)
        expected[j] = 1.0
        np.testing.assert_array_equal(w[i], expected)
        np.testing.assert_allclose(out[i], V[j])


def test_hard_attention_breaks_ties_at_the_first_index():
    _, w = an.hard_attention(np.ones((1, 2)), np.ones((3, 2)), np.eye(3))
    np.testing.assert_array_equal(w, [[1.0, 0.0, 0.0]])


def test_sampled_hard_attention_averages_to_soft_attention():
    Q, K, V = normal(10, (2, 4), (5, 4), (5, 3))
    mask = np.array([[True, True, False, True, True], [False] * 5])
    soft_out, soft_w = an.attention(Q, K, V, mask)
    rng = np.random.default_rng(0)
    draws = [an.sampled_hard_attention(Q, K, V, mask, rng=rng)[1] for _ in range(4000)]
    freq = np.mean(draws, axis=0)
    assert set(np.unique(draws)) <= {0.0, 1.0}
    assert (freq[0, 2] == 0) and (freq[1] == 0).all()  # never a masked key
    np.testing.assert_allclose(freq[0], soft_w[0], atol=0.03)


def test_sinusoidal_encoding_follows_the_formula_interleaved():
    T, d = 7, 6
    pe = an.sinusoidal_encoding(T, d)
    assert pe.shape == (T, d)
    for p in range(T):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert pe[p, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[p, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)
    odd = an.sinusoidal_encoding(3, 5)
    assert odd.shape == (3, 5)
    np.testing.assert_allclose(odd[:, 4], np.sin(np.arange(3) / 10000 ** (4 / 5)))


def test_sinusoidal_offsets_are_rotations():
    pe = an.sinusoidal_encoding(20, 8)
    k = 3
    for i in range(4):
        w = 1 / 10000 ** (2 * i / 8)
        rot = np.array([[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]])
        np.testing.assert_allclose(
            pe[k:, 2 * i : 2 * i + 2], pe[:-k, 2 * i : 2 * i + 2] @ rot, atol=1e-12
        )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.self_attention(
                np.zeros((2, 4, 6)), np.zeros((5, 3)), np.zeros((6, 3)), np.zeros((6, 3))
            ),
            r"W_q \(5, 3\) expects inputs with 5 features, but they have 6",
        ),
        (
            lambda: an.self_attention(
                np.zeros((2, 4, 6)), np.zeros((6, 3)), np.zeros((6, 2)), np.zeros((6, 3))
            ),
            r"W_q \(6, 3\) and W_k \(6, 2\) disagree on d_k \(3 vs 2\)",
        ),
        (
            lambda: an.cross_attention(
                np.zeros((2, 3, 5)),
                np.zeros((2, 4, 6)),
                np.zeros((5, 3)),
                np.zeros((5, 3)),
                np.zeros((6, 3)),
            ),
            r"W_k \(5, 3\) expects inputs with 5 features, but they have 6",
        ),
        (
            lambda: an.self_attention(
                np.zeros((2, 4, 6)),
                np.zeros((6, 3)),
                np.zeros((6, 3)),
                np.zeros((6, 3)),
                np.ones((4, 5), dtype=bool),
            ),
            r"mask \(4, 5\) cannot broadcast to the scores \(2, 4, 4\)",
        ),
        (
            lambda: an.self_attention(
                np.zeros(6), np.zeros((6, 3)), np.zeros((6, 3)), np.zeros((6, 3))
            ),
            r"X \(6,\) has 1 axes; expected at least 2",
        ),
        (
            lambda: an.hard_attention(np.zeros((2, 3)), np.zeros((4, 2)), np.zeros((4, 1))),
            r"Q \(2, 3\) and K \(4, 2\) disagree on d_k",
        ),
        (lambda: an.sinusoidal_encoding(4, 0), r"d_model must be a positive integer, got 0"),
    ],
)
def test_bad_input_names_the_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()
