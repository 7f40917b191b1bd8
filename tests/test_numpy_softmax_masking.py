"""attnlib.numpy, lesson 02: softmax, masks and scaled dot-product attention."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, qkv_shapes, random_mask

import attnlib.numpy as an

pytestmark = pytest.mark.lesson02


def loop_attention(Q, K, V, mask=None):
    """Attention for one (m, d) problem, one query at a time, with math.exp."""
    m, n = Q.shape[0], K.shape[0]
    out, weights = np.zeros((m, V.shape[1])), np.zeros((m, n))
    for i in range(m):
        allowed = [j for j in range(n) if mask is None or mask[i, j]]
        if not allowed:
            continue
        s = {j: float(Q[i] @ K[j]) / math.sqrt(Q.shape[1]) for j in allowed}
        top = max(s.values())
        z = sum(math.exp(v - top) for v in s.values())
        for j in allowed:
            weights[i, j] = math.exp(s[j] - top) / z
        out[i] = weights[i] @ V
    return out, weights


@settings(max_examples=50, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=SEEDS, data=st.data())
def test_softmax_sums_to_one_along_any_axis(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = normal(seed, tuple(shape), scale=5)
    p = an.softmax(x, axis=axis)
    np.testing.assert_allclose(p.sum(axis=axis), 1.0, rtol=1e-12)
    assert (p > 0).all()
    np.testing.assert_array_equal(np.argmax(p, axis=axis), np.argmax(x, axis=axis))


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, shift=st.floats(-1e4, 1e4))
def test_softmax_ignores_a_constant_shift(seed, shift):
    (x,) = normal(seed, (3, 6))
    np.testing.assert_allclose(an.softmax(x + shift), an.softmax(x), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_softmax_stays_finite_at_extreme_logits(dtype):
    x = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], dtype=dtype)
    p = an.softmax(x)
    assert p.dtype == dtype
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p[0], [1, 0, 0], atol=1e-6)
    np.testing.assert_allclose(p[1], [1 / 3] * 3, rtol=1e-3)


def test_temperature_sharpens_and_flattens():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(an.softmax(x, temperature=2.0), an.softmax(x / 2))
    assert an.softmax(x, temperature=0.01)[2] > 0.999
    np.testing.assert_allclose(an.softmax(x, temperature=1e6), [1 / 3] * 3, rtol=1e-5)


def test_an_all_minus_inf_row_gives_zeros_not_nan():
    p = an.softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    np.testing.assert_array_equal(p, [[0.0, 0.0], [1.0, 0.0]])


def test_worked_causal_example_row_0_3_4():
    scores = np.array([[0.0, 3.0, 4.0]] * 3)
    w = an.masked_softmax(scores, an.causal_mask(3))
    e3, e4 = math.exp(3), math.exp(4)
    np.testing.assert_allclose(w[0], [1, 0, 0])
    np.testing.assert_allclose(w[1], [1 / (1 + e3), e3 / (1 + e3), 0])
    np.testing.assert_allclose(w[2], [1 / (1 + e3 + e4), e3 / (1 + e3 + e4), e4 / (1 + e3 + e4)])


def test_causal_mask_is_lower_triangular():
    mask = an.causal_mask(4)
    assert mask.dtype == bool and mask.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert mask[i, j] == (j <= i)


def test_padding_mask_marks_real_keys():
    mask = an.padding_mask([3, 0, 5], 5)
    assert mask.shape == (3, 1, 5) and mask.dtype == bool
    np.testing.assert_array_equal(mask[:, 0].sum(axis=-1), [3, 0, 5])
    np.testing.assert_array_equal(mask[0, 0], [True, True, True, False, False])


@settings(max_examples=60, deadline=None)
@given(shapes=qkv_shapes(max_batch_axes=0), seed=SEEDS)
def test_attention_matches_the_loop_definition(shapes, seed):
    Q, K, V = normal(seed, *shapes)
    mask = random_mask(seed, (Q.shape[0], K.shape[0]))
    out, w = an.attention(Q, K, V, mask)
    ref_out, ref_w = loop_attention(Q, K, V, mask)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)
    np.testing.assert_allclose(out, ref_out, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(shapes=qkv_shapes(), seed=SEEDS)
def test_attention_invariants_with_a_random_mask(shapes, seed):
    Q, K, V = normal(seed, *shapes, scale=3)
    mask = random_mask(seed, Q.shape[:-1] + (K.shape[-2],))
    out, w = an.attention(Q, K, V, mask)
    assert w[~np.broadcast_to(mask, w.shape)].max(initial=0.0) == 0.0  # masked keys: exactly 0
    row_sums = w.sum(axis=-1)
    has_key = np.broadcast_to(mask, w.shape).any(axis=-1)
    np.testing.assert_allclose(row_sums[has_key], 1.0, rtol=1e-12)
    np.testing.assert_array_equal(row_sums[~has_key], 0.0)
    np.testing.assert_array_equal(out[~has_key], 0.0)  # fully masked rows: zero output


def test_attention_matches_pytorch_sdpa():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    Q, K, V = normal(3, (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))
    mask = random_mask(3, (2, 1, 5, 7), p_keep=0.8)
    mask[..., 0] = True  # SDPA returns NaN for fully masked rows; keep one key per row
    out, _ = an.attention(Q, K, V, mask)
    t = [torch.from_numpy(a) for a in (Q, K, V, mask)]
    ref = F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=t[3]).numpy()
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)


def test_mask_with_batch_heads_and_length_all_different_broadcasts_per_batch():
    B, h, T = 2, 3, 5
    Q, K, V = normal(4, (B, h, T, 4), (B, h, T, 4), (B, h, T, 2))
    pad = an.padding_mask([2, 4], T)[:, None]  # (B, 1, 1, T)
    _, w = an.attention(Q, K, V, pad)
    assert w.shape == (B, h, T, T)
    assert (w[0, :, :, 2:] == 0).all() and (w[1, :, :, 4:] == 0).all()
    assert (w[1, :, :, 2:4] > 0).all()


def test_identical_keys_give_uniform_weights_and_one_close_key_dominates():
    q = np.array([[10.0, 0.0]])
    _, w = an.attention(q, np.ones((4, 2)), np.eye(4))
    np.testing.assert_allclose(w, [[0.25] * 4])
    K = np.array([[10.0, 0.0], [0.0, 10.0], [-10.0, 0.0]])
    _, w = an.attention(q, K, np.eye(3))
    assert w[0, 0] > 0.999


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_keeps_dtype_and_extreme_scores_stay_finite(dtype):
    Q, K, V = normal(5, (4, 8), (6, 8), (6, 3), scale=1e2, dtype=dtype)
    out, w = an.attention(Q, K, V)
    assert out.dtype == dtype and w.dtype == dtype
    assert np.isfinite(out).all() and np.isfinite(w).all()


def test_mask_converters_round_trip():
    kpm = np.array([[False, False, True], [False, True, True]])
    keep = an.from_key_padding_mask(kpm)
    np.testing.assert_array_equal(keep, an.padding_mask([2, 1], 3))
    np.testing.assert_array_equal(an.to_key_padding_mask(keep), kpm)
    additive = an.to_additive_mask(an.causal_mask(3))
    assert additive[0, 1] == -np.inf and additive[1, 0] == 0
    np.testing.assert_array_equal(an.from_additive_mask(additive), an.causal_mask(3))
    np.testing.assert_array_equal(
        an.from_additive_mask(np.where(an.causal_mask(3), 0, -1e9)), an.causal_mask(3)
    )


def test_minus_1e9_and_boolean_masks_agree_when_a_key_is_allowed():
    Q, K, V = normal(6, (3, 4), (5, 4), (5, 2))
    mask = np.tril(np.ones((3, 5), dtype=bool))
    scores = an.scaled_dot_scores(Q, K) + np.where(mask, 0.0, -1e9)
    np.testing.assert_allclose(
        an.softmax(scores), an.masked_softmax(an.scaled_dot_scores(Q, K), mask)
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.attention(np.zeros((2, 5, 8)), np.zeros((2, 7, 8)), np.zeros((2, 6, 3))),
            r"K \(2, 7, 8\) and V \(2, 6, 3\) disagree on the number of keys n \(7 vs 6\)",
        ),
        (
            lambda: an.attention(
                np.zeros((2, 5, 8)),
                np.zeros((2, 7, 8)),
                np.zeros((2, 7, 3)),
                np.ones((3, 5, 7), dtype=bool),
            ),
            r"mask \(3, 5, 7\) cannot broadcast to the scores \(2, 5, 7\)",
        ),
        (
            lambda: an.attention(
                np.zeros((5, 8)), np.zeros((7, 8)), np.zeros((7, 3)), np.ones((2, 5, 7), dtype=bool)
            ),
            r"mask \(2, 5, 7\) cannot broadcast to the scores \(5, 7\)",
        ),
        (
            lambda: an.masked_softmax(np.zeros((5, 7)), np.ones((5, 7))),
            r"mask \(5, 7\) has dtype float64; masks are boolean, True = may attend; .*"
            r"from_additive_mask",
        ),
        (
            lambda: an.attention(
                np.zeros((5, 8)), np.zeros((7, 8)), np.zeros((7, 3), dtype=complex)
            ),
            r"V \(7, 3\) has dtype complex128",
        ),
        (lambda: an.softmax(np.zeros((2, 3)), axis=2), r"axis 2 is out of range for x \(2, 3\)"),
        (lambda: an.softmax(np.zeros(3), temperature=0), r"temperature must be a positive"),
        (lambda: an.causal_mask(0), r"T must be a positive integer, got 0"),
        (lambda: an.causal_mask(2.5), r"T must be a positive integer, got 2.5"),
        (lambda: an.padding_mask([2, 7], 5), r"lengths\[1\] = 7 is outside \[0, max_len\]"),
        (lambda: an.padding_mask([[2]], 5), r"lengths \(1, 1\) of dtype int64 must be a 1-D"),
        (
            lambda: an.from_key_padding_mask(np.zeros((2, 3))),
            r"key_padding_mask \(2, 3\) has dtype",
        ),
        (
            lambda: an.to_key_padding_mask(np.ones((2, 3, 3), dtype=bool)),
            r"mask \(2, 3, 3\) differs per query",
        ),
        (
            lambda: an.from_additive_mask(np.array([0.0, -0.5])),
            r"additive mask \(2,\) has -0.5 at \(1,\): neither 0",
        ),
    ],
)
def test_bad_input_names_the_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()
