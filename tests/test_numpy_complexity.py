"""attnlib.numpy, lesson 05: cost formulas, chunked attention, fitted exponents."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, qkv_shapes

import attnlib.numpy as an

pytestmark = pytest.mark.lesson05


def test_flops_and_bytes_follow_their_formulas():
    assert an.attention_flops(3, 5, 7, 11) == 2 * 3 * 5 * 7 + 2 * 3 * 5 * 11
    assert an.attention_flops(0, 5, 7, 11) == 0
    assert an.score_matrix_bytes(2, 8, 4096, 4096, 4) == 2 * 8 * 4096 * 4096 * 4
    # doubling the sequence length quadruples both
    assert an.attention_flops(256, 256, 64, 64) * 4 == an.attention_flops(512, 512, 64, 64)
    assert an.score_matrix_bytes(1, 1, 1024, 1024, 2) == 2 * 2**20


@settings(max_examples=60, deadline=None)
@given(shapes=qkv_shapes(max_len=12), seed=SEEDS, block=st.integers(1, 14), causal=st.booleans())
def test_chunked_attention_equals_attention(shapes, seed, block, causal):
    Q, K, V = normal(seed, *shapes, scale=3)
    m, n = Q.shape[-2], K.shape[-2]
    mask = np.tril(np.ones((m, n), dtype=bool)) if causal else None
    expected, _ = an.attention(Q, K, V, mask)
    got = an.chunked_attention(Q, K, V, block_size=block, causal=causal)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_chunked_attention_keeps_float32_and_survives_extreme_scores():
    # Scores reach about ±3000: float32 rounds a logit that large by ~1e-4.
    Q, K = normal(2, (3, 40, 16), (3, 50, 16), scale=30, dtype=np.float32)
    (V,) = normal(3, (3, 50, 8), dtype=np.float32)
    got = an.chunked_attention(Q, K, V, block_size=7)
    expected, _ = an.attention(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64))
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3)


def test_chunked_attention_memory_stays_linear_in_n():
    n, d, block = 2048, 32, 64
    Q, K, V = normal(3, (n, d), (n, d), (n, d), dtype=np.float32)
    tracemalloc.start()
    try:
        an.chunked_attention(Q, K, V, block_size=block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full_scores = n * n * 4
    assert peak < full_scores / 8, f"peak {peak} bytes vs {full_scores} for the full matrix"


@settings(max_examples=30, deadline=None)
@given(p=st.floats(0.5, 3.0), c=st.floats(1e-6, 1e3), k=st.integers(2, 8))
def test_fit_exponent_recovers_a_power_law(p, c, k):
    ns = np.geomspace(64, 8192, k)
    assert an.fit_exponent(ns, c * ns**p) == pytest.approx(p, abs=1e-9)


def test_fit_exponent_of_noisy_quadratic_is_near_two():
    rng = np.random.default_rng(0)
    ns = [256, 512, 1024, 2048, 4096]
    times = [1e-9 * n**2 * rng.uniform(0.9, 1.1) for n in ns]
    assert 1.9 < an.fit_exponent(ns, times) < 2.1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.chunked_attention(np.zeros((4, 8)), np.zeros((5, 8)), np.zeros((5, 2)), 0),
            r"block_size must be a positive integer, got 0",
        ),
        (
            lambda: an.chunked_attention(np.zeros((4, 8)), np.zeros((5, 8)), np.zeros((6, 2))),
            r"K \(5, 8\) and V \(6, 2\) disagree on the number of keys n \(5 vs 6\)",
        ),
        (lambda: an.fit_exponent([1, 2, 3], [1, 2]), r"ns \(3,\) and times \(2,\) must be 1-D"),
        (lambda: an.fit_exponent([1, 2], [1, 0]), r"must be positive"),
        (lambda: an.fit_exponent([4, 4], [1, 2]), r"at least two distinct sizes"),
        (lambda: an.attention_flops(-1, 2, 3, 4), r"m must be a non-negative integer, got -1"),
        (lambda: an.score_matrix_bytes(1, 2, 3, 4, 2.5), r"itemsize must be a non-negative"),
    ],
)
def test_bad_input_names_the_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()
