"""attnlib.numpy.chunked_attention, the fast path: exactness, memory, threads, benchmarks.

Speed itself is measured by ``python -m benchmarks``, never asserted here.
"""

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from strategies import normal
from threadpoolctl import threadpool_limits

import attnlib.numpy as an
from attnlib.measure import peak_memory, time_call
from attnlib.numpy.chunked import choose_blocks, tiled_attention

pytestmark = pytest.mark.lesson05

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def sdpa(Q, K, V, causal):
    """PyTorch's fused kernel on NumPy inputs, as a NumPy array."""
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)) for x in (Q, K, V))
    with torch.inference_mode():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()


def reference(Q, K, V, causal):
    """The readable definition, in float64."""
    Q, K, V = (np.asarray(x, dtype=np.float64) for x in (Q, K, V))
    m, n = Q.shape[-2], K.shape[-2]
    mask = np.tril(np.ones((m, n), dtype=bool)) if causal else None
    return an.attention(Q, K, V, mask)[0]


@pytest.mark.parametrize("causal", [False, True])
def test_float32_matches_sdpa_with_several_heads(causal):
    Q, K, V = normal(0, *[(2, 4, 1000, 64)] * 3, dtype=np.float32)
    got = an.chunked_attention(Q, K, V, causal=causal)
    assert got.dtype == np.float32 and got.shape == (2, 4, 1000, 64)
    assert np.abs(got - sdpa(Q, K, V, causal)).max() <= 2e-5


@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention_with_m_not_n_matches_sdpa(causal):
    # SDPA's is_causal aligns queries and keys at index 0 (key j visible iff j <= i), as we do.
    Q, K, V = normal(1, (3, 700, 64), (3, 1100, 64), (3, 1100, 32), dtype=np.float32)
    got = an.chunked_attention(Q, K, V, causal=causal)
    assert np.abs(got - sdpa(Q, K, V, causal)).max() <= 2e-5


@pytest.mark.parametrize("causal", [False, True])
def test_peak_memory_at_4096_tokens_8_heads(causal):
    Q, K, V = normal(2, *[(1, 8, 4096, 64)] * 3, dtype=np.float32)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        an.chunked_attention(Q, K, V, causal=causal)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    extra = peak - before
    output = Q.nbytes  # the result itself, (1, 8, 4096, 64) float32 = 8 MiB
    full_scores = an.score_matrix_bytes(1, 8, 4096, 4096, 4)  # 512 MiB
    assert extra <= 32 * MiB, f"{extra / MiB:.1f} MiB extra (output {output / MiB:.0f} MiB)"
    assert extra < full_scores / 16


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_and_one_thread_agree(causal, dtype):
    Q, K, V = normal(3, (2, 3, 517, 24), (2, 3, 517, 24), (2, 3, 517, 40), dtype=dtype)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    one = tiled_attention(Q, K, V, block_q=64, block_k=96, causal=causal, workers=1)
    for workers in (2, 3):
        many = tiled_attention(Q, K, V, block_q=64, block_k=96, causal=causal, workers=workers)
        np.testing.assert_allclose(many, one, rtol=0, atol=tol)
    np.testing.assert_allclose(one, reference(Q, K, V, causal), atol=tol * 5)


@pytest.mark.parametrize("causal", [False, True])
def test_public_function_threads_unless_blas_is_limited_to_one_thread(causal):
    # large enough (6 · 1100² scores) for the default to use every BLAS thread
    Q, K, V = normal(8, *[(2, 3, 1100, 32)] * 3, dtype=np.float32)
    with threadpool_limits(1, user_api="blas"):
        single = an.chunked_attention(Q, K, V, causal=causal)
    threaded = an.chunked_attention(Q, K, V, causal=causal)
    np.testing.assert_allclose(threaded, single, rtol=0, atol=2e-6)
    assert np.abs(threaded - sdpa(Q, K, V, causal)).max() <= 2e-5


def test_an_error_in_a_worker_thread_reaches_the_caller(monkeypatch):
    import attnlib.numpy.chunked as chunked

    calls = []

    def broken(*args):
        calls.append(args)
        raise MemoryError("no room for a tile")

    monkeypatch.setattr(chunked, "_attend_query_block", broken)
    Q = np.ones((4, 300, 8))
    with pytest.raises(MemoryError, match="no room"):
        tiled_attention(Q, Q, Q, block_q=32, workers=2)
    assert len(calls) <= 2  # after the first failure the threads take no more tasks


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_that_keep_growing_raise_the_offsets(monkeypatch, causal, dtype):
    # Key j has norm ~ j: every key block outscores the last by far more than e^8,
    # so each block has to recompute its queries with a higher offset.
    import attnlib.numpy.chunked as chunked

    raised = []
    original = chunked._raise_offsets
    monkeypatch.setattr(
        chunked, "_raise_offsets", lambda cols, *a: raised.append(cols.size) or original(cols, *a)
    )
    Q, K, V = normal(9, (2, 300, 16), (2, 400, 16), (2, 400, 8))
    Q = np.abs(Q).astype(dtype)
    K = (np.abs(K) * np.linspace(0, 4, 400)[:, None]).astype(dtype)  # scores up to ~±60
    V = V.astype(dtype)
    got = tiled_attention(Q, K, V, block_k=32, causal=causal, workers=2)
    assert raised, "the slow path never ran"
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=0, atol=1e-4)
    np.testing.assert_allclose(got, reference(Q, K, V, causal), **tol)
    assert np.isfinite(got).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("m", "n", "block"),
    [
        (1, 1, None),
        (1, 777, None),
        (777, 1, None),
        (1, 300, 7),
        (300, 1, 7),
        (513, 513, None),  # one past the float32 block
        (1000, 300, None),  # more queries than keys: late queries see every key
        (300, 1000, None),  # more keys than queries: late keys are nobody's past
        (257, 611, 100),
    ],
)
def test_odd_sizes_are_exact_in_float64(m, n, block, causal):
    Q, K, V = normal(4, (2, m, 16), (2, n, 16), (2, n, 8), scale=2)
    expected = reference(Q, K, V, causal)
    got = an.chunked_attention(Q, K, V, block_size=block, causal=causal)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    many = tiled_attention(Q, K, V, block_q=64, block_k=block, causal=causal, workers=2)
    np.testing.assert_allclose(many, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_broadcast_batch_axes_and_strided_inputs(causal):
    # Q (2, 1, m, d), K and V (1, 3, n, d): batch axes broadcast to (2, 3)
    Q, K, V = normal(5, (2, 1, 200, 16), (1, 3, 250, 16), (1, 3, 250, 8))
    expected = reference(Q, K, V, causal)
    got = tiled_attention(Q, K, V, block_q=32, block_k=48, causal=causal, workers=2)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    # heads split from (B, T, h*d) are strided views; reversed rows are a negative stride
    (X,) = normal(6, (2, 300, 4 * 16))
    heads = an.split_heads(X, 4)  # (2, 4, 300, 16), not contiguous
    flipped = heads[..., ::-1, :]
    got = an.chunked_attention(heads, flipped, heads, block_size=64, causal=causal)
    np.testing.assert_allclose(got, reference(heads, flipped, heads, causal), atol=1e-12)


def test_float16_is_computed_in_float32_and_returned_as_float16():
    Q, K, V = normal(7, (2, 90, 16), (2, 120, 16), (2, 120, 8), dtype=np.float16)
    got = an.chunked_attention(Q, K, V, block_size=32, causal=True)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, reference(Q, K, V, True), atol=2e-3)


def test_no_keys_or_no_queries_give_empty_or_zero_output():
    assert an.chunked_attention(np.ones((0, 4)), np.ones((3, 4)), np.ones((3, 2))).shape == (0, 2)
    np.testing.assert_array_equal(
        an.chunked_attention(np.ones((3, 4)), np.ones((0, 4)), np.ones((0, 2))), np.zeros((3, 2))
    )


def test_block_choice_fits_the_problem_and_the_cache():
    assert choose_blocks(4096, 4096, np.float32) == (512, 512)
    bq, bk = choose_blocks(4096, 4096, np.float64)
    assert bq * bk * 8 <= 1 << 20
    assert choose_blocks(3, 5, np.float32) == (3, 5)
    assert choose_blocks(4096, 4096, np.float32, block_k=7)[1] == 7


def test_measure_helpers():
    assert time_call(lambda: sum(range(100)), repeats=3) > 0
    assert 7 * MiB <= peak_memory(lambda: np.ones(1 << 20)) <= 9 * MiB  # 8 MiB of float64
    # In a fresh process, as its doc says: here the allocator may reuse memory it kept resident
    # from an earlier test, and the growth reads 0.
    fresh = ("import numpy as np; from attnlib.measure import peak_rss_growth; "
             "print(peak_rss_growth(lambda: np.ones(1 << 22)))")  # 32 MiB, touched  # fmt: skip
    done = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    growth = None if done.stdout.strip() == "None" else int(done.stdout)
    assert growth is None or 24 * MiB <= growth <= 40 * MiB, growth
    with pytest.raises(ValueError, match="repeats >= 1"):
        time_call(lambda: None, repeats=0)


def test_benchmarks_quick_mode_writes_its_table(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "results.md").read_text()
    for needle in ("naive NumPy", "chunked NumPy", "naive Torch", "Torch SDPA", "Head-to-head"):
        assert needle in table
    assert "threadpool: blas" in done.stdout  # the BLAS and thread information is printed
    rows = (tmp_path / "results.csv").read_text().strip().splitlines()
    assert rows[0].startswith("method,") and len(rows) == 1 + 4 * 2
    assert (tmp_path / "scaling.png").stat().st_size > 0
    assert len((tmp_path / "headtohead.csv").read_text().strip().splitlines()) == 3
