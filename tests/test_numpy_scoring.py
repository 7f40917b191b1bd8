"""attnlib.numpy, lesson 01: score functions."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, qkv_shapes

import attnlib.numpy as an

pytestmark = pytest.mark.lesson01


def loop_dot(Q, K):
    """Every score as an explicit sum, the definition written out."""
    m, n, d = Q.shape[0], K.shape[0], Q.shape[1]
    return np.array(
        [[sum(Q[i, t] * K[j, t] for t in range(d)) for j in range(n)] for i in range(m)]
    )


def test_worked_example_from_lesson_01():
    # q = [1, 0]; keys [1,0], [0,1], [1,1]; values [10,0], [0,10], [5,5]
    q = np.array([[1.0, 0.0]])
    K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    V = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])
    scores = an.dot_scores(q, K)
    np.testing.assert_array_equal(scores, [[1.0, 0.0, 1.0]])
    output = an.softmax(scores) @ V
    e = math.e
    np.testing.assert_allclose(output, [[15 * e / (2 * e + 1), (10 + 5 * e) / (2 * e + 1)]])


@settings(max_examples=40, deadline=None)
@given(shapes=qkv_shapes(max_batch_axes=0), seed=SEEDS)
def test_dot_scores_equal_the_written_out_sum(shapes, seed):
    Q, K, _ = normal(seed, *shapes)
    np.testing.assert_allclose(an.dot_scores(Q, K), loop_dot(Q, K), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(shapes=qkv_shapes(), seed=SEEDS)
def test_scaled_scores_divide_by_sqrt_dk(shapes, seed):
    Q, K, _ = normal(seed, *shapes)
    d_k = Q.shape[-1]
    scaled = an.scaled_dot_scores(Q, K)
    assert scaled.shape == (
        *np.broadcast_shapes(Q.shape[:-2], K.shape[:-2]),
        Q.shape[-2],
        K.shape[-2],
    )
    np.testing.assert_allclose(scaled * math.sqrt(d_k), an.dot_scores(Q, K), atol=1e-12)


def test_scaling_keeps_score_variance_near_one():
    rng = np.random.default_rng(0)
    for d_k in (4, 64, 512):
        Q = rng.standard_normal((2000, d_k))
        K = rng.standard_normal((2000, d_k))
        raw = np.sum(Q * K, axis=-1)  # 2000 independent q·k
        assert raw.var() == pytest.approx(d_k, rel=0.15)
        assert (raw / math.sqrt(d_k)).var() == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_keep_the_input_dtype(dtype):
    Q, K = normal(0, (3, 4), (5, 4), dtype=dtype)
    assert an.dot_scores(Q, K).dtype == dtype
    assert an.scaled_dot_scores(Q, K).dtype == dtype
    assert an.cosine_scores(Q, K).dtype == dtype


def test_integer_inputs_are_promoted_to_float():
    scores = an.scaled_dot_scores([[1, 0]], [[1, 0], [0, 1]])
    assert scores.dtype == np.float64
    np.testing.assert_allclose(scores, [[1 / math.sqrt(2), 0.0]])


@settings(max_examples=30, deadline=None)
@given(
    seed=SEEDS,
    m=st.integers(1, 5),
    n=st.integers(1, 5),
    dq=st.integers(1, 6),
    dk=st.integers(1, 6),
    h=st.integers(1, 6),
)
def test_additive_scores_match_the_pairwise_formula(seed, m, n, dq, dk, h):
    Q, K, W_q, W_k, v = normal(seed, (m, dq), (n, dk), (dq, h), (dk, h), (h,))
    expected = np.array(
        [[v @ np.tanh(Q[i] @ W_q + K[j] @ W_k) for j in range(n)] for i in range(m)]
    )
    np.testing.assert_allclose(an.additive_scores(Q, K, W_q, W_k, v), expected, atol=1e-12)


def test_additive_scores_broadcast_over_batch():
    Q, K, W_q, W_k, v = normal(1, (2, 3, 4), (1, 5, 6), (4, 7), (6, 7), (7,))
    out = an.additive_scores(Q, K, W_q, W_k, v)
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(out[1], an.additive_scores(Q[1], K[0], W_q, W_k, v))


@settings(max_examples=40, deadline=None)
@given(shapes=qkv_shapes(), seed=SEEDS, a=st.floats(0.01, 100), b=st.floats(0.01, 100))
def test_cosine_scores_are_scale_invariant_and_bounded(shapes, seed, a, b):
    Q, K, _ = normal(seed, *shapes)
    c = an.cosine_scores(Q, K)
    np.testing.assert_allclose(an.cosine_scores(a * Q, b * K), c, atol=1e-10)
    assert np.all(np.abs(c) <= 1 + 1e-12)


def test_cosine_of_a_vector_with_itself_is_one_and_zero_vectors_give_zero():
    Q = np.array([[3.0, 4.0], [0.0, 0.0]])
    c = an.cosine_scores(Q, Q)
    np.testing.assert_allclose(c, [[1.0, 0.0], [0.0, 0.0]])
    assert np.isfinite(c).all()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.dot_scores(np.zeros((2, 5, 8)), np.zeros((2, 7, 6))),
            r"Q \(2, 5, 8\) and K \(2, 7, 6\) disagree on d_k \(8 vs 6\)",
        ),
        (
            lambda: an.scaled_dot_scores(np.zeros(8), np.zeros((3, 8))),
            r"Q \(8,\) has 1 axes; expected at least 2: \(\.\.\., m, d_k\)",
        ),
        (
            lambda: an.cosine_scores(np.zeros((2, 5, 8)), np.zeros((3, 7, 8))),
            r"Q \(2, 5, 8\) and K \(3, 7, 8\) have batch axes \(2,\) and \(3,\)",
        ),
        (
            lambda: an.dot_scores(np.zeros((2, 3), dtype=bool), np.zeros((2, 3))),
            r"Q \(2, 3\) has dtype bool; attention needs real floating-point",
        ),
        (
            lambda: an.additive_scores(
                np.zeros((3, 4)), np.zeros((5, 6)), np.zeros((4, 7)), np.zeros((6, 7)), np.zeros(5)
            ),
            r"W_q \(4, 7\), W_k \(6, 7\) and v \(5,\) must share the hidden size h",
        ),
        (
            lambda: an.additive_scores(
                np.zeros((3, 4)), np.zeros((5, 6)), np.zeros((5, 7)), np.zeros((6, 7)), np.zeros(7)
            ),
            r"W_q \(5, 7\) expects inputs with 5 features, but they have 4",
        ),
        (
            lambda: an.cosine_scores(np.zeros((2, 2)), np.zeros((2, 2)), eps=0),
            r"eps must be positive, got 0",
        ),
    ],
)
def test_bad_input_names_the_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()
