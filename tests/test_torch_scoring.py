"""attnlib.torch score functions (lesson 01) against independent torch formulations."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.torch as at

pytestmark = pytest.mark.lesson01

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=30, deadline=None)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


@st.composite
def qk(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """Q (..., m, d) and K (..., n, d) with broadcastable batch axes."""
    gen = torch.Generator().manual_seed(draw(SEEDS))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    k_batch = [draw(st.sampled_from([b, 1])) for b in batch]
    m, n, d = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    return randn(gen, *batch, m, d), randn(gen, *k_batch, n, d)


@FAST
@given(pair=qk())
def test_dot_scores_match_einsum(pair) -> None:
    Q, K = pair
    expected = torch.einsum("...id,...jd->...ij", Q, K)
    torch.testing.assert_close(at.dot_scores(Q, K), expected, rtol=0, atol=1e-12)


@FAST
@given(pair=qk())
def test_scaled_dot_scores_divide_by_sqrt_d_k(pair) -> None:
    Q, K = pair
    d_k = Q.shape[-1]
    expected = torch.einsum("...id,...jd->...ij", Q, K) / math.sqrt(d_k)
    torch.testing.assert_close(at.scaled_dot_scores(Q, K), expected, rtol=0, atol=1e-12)


def test_scaled_scores_are_what_sdpa_softmaxes() -> None:
    gen = torch.Generator().manual_seed(0)
    Q, K = randn(gen, 2, 5, 16), randn(gen, 2, 7, 16)
    V = torch.eye(7, dtype=F64).expand(2, 7, 7)  # the output of SDPA is then its weights
    weights = F.scaled_dot_product_attention(Q, K, V)
    torch.testing.assert_close(
        torch.softmax(at.scaled_dot_scores(Q, K), -1), weights, rtol=0, atol=1e-12
    )


@FAST
@given(seed=SEEDS, m=st.integers(1, 4), n=st.integers(1, 4), h=st.integers(1, 5))
def test_additive_scores_match_pairwise_loop(seed: int, m: int, n: int, h: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    Q, K = randn(gen, 2, m, 3), randn(gen, 2, n, 4)  # d_q != d_k is allowed
    W_q, W_k, v = randn(gen, 3, h), randn(gen, 4, h), randn(gen, h)
    scores = at.additive_scores(Q, K, W_q, W_k, v)
    assert scores.shape == (2, m, n)
    for b in range(2):
        for i in range(m):
            for j in range(n):
                expected = torch.dot(v, torch.tanh(Q[b, i] @ W_q + K[b, j] @ W_k))
                torch.testing.assert_close(scores[b, i, j], expected, rtol=0, atol=1e-12)


def test_additive_scores_gradcheck() -> None:
    gen = torch.Generator().manual_seed(1)
    args = (randn(gen, 2, 3, 3), randn(gen, 1, 4, 2), randn(gen, 3, 5), randn(gen, 2, 5))
    args = (*args, randn(gen, 5))
    args = tuple(a.requires_grad_() for a in args)
    assert torch.autograd.gradcheck(at.additive_scores, args)


@FAST
@given(pair=qk())
def test_cosine_scores_match_pairwise_cosine_similarity(pair) -> None:
    Q, K = pair
    expected = F.cosine_similarity(Q.unsqueeze(-2), K.unsqueeze(-3), dim=-1)
    torch.testing.assert_close(at.cosine_scores(Q, K), expected, rtol=0, atol=1e-12)


@FAST
@given(
    pair=qk(),
    a=st.floats(1e-3, 1e3),
    b=st.floats(1e-3, 1e3),
    per_row=st.booleans(),
)
def test_cosine_scores_are_scale_invariant(pair, a: float, b: float, per_row: bool) -> None:
    Q, K = pair
    if per_row:  # a different positive factor for every vector
        gen = torch.Generator().manual_seed(int(a * 1000))
        sq = torch.rand(*Q.shape[:-1], 1, generator=gen, dtype=F64) * a + 1e-3
        sk = torch.rand(*K.shape[:-1], 1, generator=gen, dtype=F64) * b + 1e-3
    else:
        sq, sk = a, b
    torch.testing.assert_close(
        at.cosine_scores(Q * sq, K * sk), at.cosine_scores(Q, K), rtol=0, atol=1e-12
    )
    assert (at.cosine_scores(Q, K).abs() <= 1 + 1e-12).all()


def test_cosine_zero_vector_scores_zero_with_finite_gradient() -> None:
    gen = torch.Generator().manual_seed(2)
    Q = randn(gen, 3, 4)
    Q[1] = 0.0
    K = randn(gen, 5, 4)
    K[2] = 0.0
    Q.requires_grad_()
    K.requires_grad_()
    scores = at.cosine_scores(Q, K)
    assert torch.equal(scores[1], torch.zeros(5, dtype=F64))
    assert torch.equal(scores[:, 2], torch.zeros(3, dtype=F64))
    gQ, gK = torch.autograd.grad(scores.sum(), (Q, K))
    assert torch.isfinite(gQ).all() and torch.isfinite(gK).all()


@pytest.mark.parametrize("fn", [at.dot_scores, at.scaled_dot_scores, at.cosine_scores])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scores_keep_the_input_dtype(fn, dtype: torch.dtype) -> None:
    Q, K = torch.ones(2, 3, 4, dtype=dtype), torch.ones(2, 5, 4, dtype=dtype)
    scores = fn(Q, K)
    assert scores.dtype == dtype and scores.shape == (2, 3, 5)


def test_scaled_scores_do_not_overflow_float16_before_scaling() -> None:
    # Q·K = 64 * 64 * 64 = 262144 overflows float16 (max 65504); divided by sqrt(64) it fits.
    Q = torch.full((1, 64), 64.0, dtype=torch.float16)
    K = torch.full((1, 64), 64.0, dtype=torch.float16)
    scores = at.scaled_dot_scores(Q, K)
    assert torch.isfinite(scores).all()
    expected = torch.tensor([[64.0**3 / 8]], dtype=F64)
    torch.testing.assert_close(scores.to(F64), expected, rtol=1e-2, atol=0)


# ------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fn", [at.dot_scores, at.scaled_dot_scores, at.cosine_scores])
def test_error_d_k_mismatch(fn) -> None:
    Q, K = torch.zeros(2, 5, 8), torch.zeros(2, 7, 6)
    msg = "Q (2, 5, 8) and K (2, 7, 6) disagree on d_k (8 vs 6)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        fn(Q, K)


@pytest.mark.parametrize("fn", [at.dot_scores, at.scaled_dot_scores, at.cosine_scores])
def test_error_integer_inputs(fn) -> None:
    with pytest.raises(ValueError, match=re.escape("K has dtype torch.int32; attention needs")):
        fn(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int32))


def test_error_batch_mismatch_and_too_few_axes() -> None:
    with pytest.raises(ValueError, match=r"have batch axes \(2,\) and \(3,\) that cannot"):
        at.dot_scores(torch.zeros(2, 5, 4), torch.zeros(3, 5, 4))
    with pytest.raises(ValueError, match=re.escape("K (4,) has 1 axes; expected at least 2")):
        at.dot_scores(torch.zeros(5, 4), torch.zeros(4))


def test_error_zero_width_in_scaled_scores() -> None:
    with pytest.raises(ValueError, match=re.escape("Q (3, 0) has d_k = 0")):
        at.scaled_dot_scores(torch.zeros(3, 0), torch.zeros(2, 0))


@pytest.mark.parametrize("eps", [0, -1e-8, float("nan"), "1e-8"])
def test_error_bad_eps(eps) -> None:
    with pytest.raises(ValueError, match="eps must be a positive number"):
        at.cosine_scores(torch.zeros(2, 3), torch.zeros(2, 3), eps=eps)


def additive_args(**shapes):
    default = {"Q": (2, 5, 3), "K": (2, 7, 4), "W_q": (3, 6), "W_k": (4, 6), "v": (6,)}
    default.update(shapes)
    return [torch.zeros(s, dtype=F64) for s in default.values()]


@pytest.mark.parametrize(
    ("shapes", "msg"),
    [
        (
            {"W_q": (4, 6)},
            "W_q (4, 6) expects inputs with 4 features, but they have 3; expected (d_q, h)",
        ),
        (
            {"W_k": (3, 6)},
            "W_k (3, 6) expects inputs with 3 features, but they have 4; expected (d_k, h)",
        ),
        ({"W_q": (3,)}, "W_q (3,) has 1 axes; expected 2: (d_q, h)"),
        ({"W_k": (4, 5)}, "W_q (3, 6), W_k (4, 5) and v (6,) must share the hidden size h"),
        ({"v": (5,)}, "W_q (3, 6), W_k (4, 6) and v (5,) must share the hidden size h"),
        ({"v": (6, 1)}, "W_q (3, 6), W_k (4, 6) and v (6, 1) must share the hidden size h"),
        ({"K": (3, 7, 4)}, "Q (2, 5, 3) and K (3, 7, 4) have batch axes (2,) and (3,)"),
        ({"Q": (3,)}, "Q (3,) has 1 axes; expected at least 2: (..., m, d_q)"),
    ],
)
def test_additive_errors(shapes: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.additive_scores(*additive_args(**shapes))


def test_additive_error_integer_projection() -> None:
    args = additive_args()
    args[2] = args[2].long()
    with pytest.raises(ValueError, match="W_q has dtype torch.int64; attention needs floating"):
        at.additive_scores(*args)
