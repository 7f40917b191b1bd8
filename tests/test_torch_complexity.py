"""attnlib.torch cost helpers and chunked attention (lesson 05)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

import attnlib.torch as at

pytestmark = pytest.mark.lesson05

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=30, deadline=None)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


# ------------------------------------------------------------------------------ counting


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 9), d_k=st.integers(1, 9), d_v=st.integers(1, 9))
def test_attention_flops_match_torch_flop_counter(m: int, n: int, d_k: int, d_v: int) -> None:
    Q, K, V = torch.zeros(m, d_k), torch.zeros(n, d_k), torch.zeros(n, d_v)
    with FlopCounterMode(display=False) as counter:
        weights = Q @ K.T  # the two products of attention
        weights @ V
    assert at.attention_flops(m, n, d_k, d_v) == counter.get_total_flops()
    assert isinstance(at.attention_flops(m, n, d_k, d_v), int)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_score_matrix_bytes_match_a_real_tensor(dtype: torch.dtype) -> None:
    scores = torch.empty(2, 3, 5, 7, dtype=dtype)
    expected = scores.nbytes
    assert at.score_matrix_bytes(2, 3, 5, 7, scores.element_size()) == expected
    assert at.score_matrix_bytes(2, 3, 5, 7, dtype) == expected
    assert isinstance(at.score_matrix_bytes(2, 3, 5, 7, 4), int)


def test_counts_accept_numpy_integers_and_grow_large() -> None:
    n = np.int64(100_000)
    assert at.score_matrix_bytes(1, 1, n, n, 4) == 4 * 10**10  # 40 GB: why chunking matters
    assert at.attention_flops(n, n, 64, 64) == 256 * 10**10


@pytest.mark.parametrize(
    ("call", "msg"),
    [
        (lambda: at.attention_flops(-1, 2, 3, 4), "m must be a non-negative integer, got -1"),
        (lambda: at.attention_flops(1, 2.5, 3, 4), "n must be a non-negative integer, got 2.5"),
        (lambda: at.attention_flops(1, 2, True, 4), "d_k must be a non-negative integer"),
        (lambda: at.score_matrix_bytes(1, 2, 3, 4, -4), "itemsize must be a non-negative"),
        (lambda: at.score_matrix_bytes(1, "2", 3, 4, 4), "heads must be a non-negative integer"),
    ],
)
def test_count_errors(call, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


# ------------------------------------------------------------------------------ fit_exponent


@FAST
@given(
    p=st.floats(-3, 3),
    c=st.floats(1e-6, 1e3),
    ns=st.lists(st.integers(1, 10_000), min_size=2, max_size=8, unique=True),
)
def test_fit_exponent_recovers_power_laws(p: float, c: float, ns: list[int]) -> None:
    times = [c * n**p for n in ns]
    assert math.isclose(at.fit_exponent(ns, times), p, abs_tol=1e-9)


def test_fit_exponent_is_the_least_squares_slope() -> None:
    ns = [64, 128, 256, 512, 1024]
    times = [0.011, 0.039, 0.17, 0.62, 2.7]  # noisy, roughly quadratic
    expected = np.polyfit(np.log(ns), np.log(times), 1)[0]
    for convert, tol in [
        (list, 1e-12),
        (np.array, 1e-12),
        (lambda x: torch.tensor(x, dtype=F64), 1e-12),
        (torch.tensor, 1e-6),  # float32: the inputs themselves are rounded
    ]:
        got = at.fit_exponent(convert(ns), convert(times))
        assert isinstance(got, float)
        assert math.isclose(got, expected, rel_tol=tol)


@pytest.mark.parametrize(
    ("ns", "times", "msg"),
    [
        ([1, 2, 3], [1, 2], "ns (3,) and times (2,) must be 1-D arrays of the same length"),
        ([[1, 2]], [[1, 2]], "ns (1, 2) and times (1, 2) must be 1-D arrays of the same length"),
        ([1, 2], [0.0, 1.0], "ns and times must be positive"),
        ([-1, 2], [1.0, 1.0], "ns and times must be positive"),
        ([1, 2], [1.0, float("inf")], "times must be finite"),
        ([4], [1.0], "ns [4.0] needs at least two distinct sizes"),
        ([4, 4], [1.0, 2.0], "ns [4.0, 4.0] needs at least two distinct sizes"),
        (["a", "b"], [1.0, 2.0], "expected a 1-D sequence of numbers"),
    ],
)
def test_fit_exponent_errors(ns, times, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.fit_exponent(ns, times)


# -------------------------------------------------------------------------- chunked attention


@st.composite
def chunked_cases(draw: st.DrawFn):
    gen = torch.Generator().manual_seed(draw(SEEDS))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    m, n = draw(st.integers(1, 9)), draw(st.integers(1, 12))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    scale = draw(st.sampled_from([1.0, 20.0]))  # large scores exercise the running maximum
    Q = randn(gen, *batch, m, d_k) * scale
    K, V = randn(gen, *batch, n, d_k), randn(gen, *batch, n, d_v)
    return Q, K, V, draw(st.integers(1, 14)), draw(st.booleans())


@FAST
@given(case=chunked_cases())
def test_chunked_attention_equals_attention(case) -> None:
    Q, K, V, block_size, causal = case
    m, n = Q.shape[-2], K.shape[-2]
    # key j allowed iff j <= i, queries and keys aligned at the start
    mask = torch.ones(m, n, dtype=torch.bool).tril() if causal else None
    expected, _ = at.attention(Q, K, V, mask)
    got = at.chunked_attention(Q, K, V, block_size=block_size, causal=causal)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_chunked_causal_is_causal_mask_when_square() -> None:
    gen = torch.Generator().manual_seed(0)
    Q, K, V = randn(gen, 2, 3, 10, 4), randn(gen, 2, 3, 10, 4), randn(gen, 2, 3, 10, 2)
    expected, _ = at.attention(Q, K, V, at.causal_mask(10), need_weights=False)
    got = at.chunked_attention(Q, K, V, block_size=3, causal=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_attention_gradients_match(causal: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    Q, K, V = randn(gen, 2, 7, 3), randn(gen, 2, 9, 3), randn(gen, 2, 9, 4)
    for t in (Q, K, V):
        t.requires_grad_()
    mask = torch.ones(7, 9, dtype=torch.bool).tril() if causal else None
    g = randn(gen, 2, 7, 4)
    expected = torch.autograd.grad(at.attention(Q, K, V, mask)[0], (Q, K, V), g)
    got = torch.autograd.grad(at.chunked_attention(Q, K, V, 4, causal), (Q, K, V), g)
    for mine, theirs in zip(got, expected, strict=True):
        assert torch.isfinite(mine).all()
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chunked_attention_16_bit(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    Q, K, V = (randn(gen, 2, 16, 8, dtype=torch.float32).to(dtype) for _ in range(3))
    got = at.chunked_attention(Q, K, V, block_size=5)
    assert got.dtype == dtype
    expected, _ = at.attention(Q.to(F64), K.to(F64), V.to(F64))
    tolerance = {torch.float16: 5e-3, torch.bfloat16: 4e-2}[dtype]
    torch.testing.assert_close(got.to(F64), expected, rtol=0, atol=tolerance)
    extreme = at.chunked_attention(Q * 300, K * 300, V, block_size=5)  # scores up to ~1e4
    assert torch.isfinite(extreme).all()


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation produces."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_chunked_attention_never_materialises_the_scores() -> None:
    gen = torch.Generator().manual_seed(3)
    B, m, n, d, block = 2, 16, 96, 4, 8
    Q, K, V = randn(gen, B, m, d), randn(gen, B, n, d), randn(gen, B, n, d)
    with LargestTensor() as probe:
        at.chunked_attention(Q, K, V, block_size=block)
    assert probe.largest <= B * m * block
    with LargestTensor() as probe:  # the probe does see full score matrices
        at.attention(Q, K, V)
    assert probe.largest >= B * m * n


@pytest.mark.parametrize("block_size", [0, -3, 2.0, True, None])
def test_chunked_attention_block_size_errors(block_size) -> None:
    Q = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        at.chunked_attention(Q, Q, Q, block_size=block_size)


def test_chunked_attention_other_errors() -> None:
    Q = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="causal must be True or False"):
        at.chunked_attention(Q, Q, Q, causal="yes")
    with pytest.raises(ValueError, match=re.escape("Q (3, 2) and K (3, 4) disagree on d_k")):
        at.chunked_attention(Q, torch.zeros(3, 4), Q)
    with pytest.raises(ValueError, match="V has dtype torch.int64; attention needs floating"):
        at.chunked_attention(Q, Q, torch.zeros(3, 2, dtype=torch.int64))
