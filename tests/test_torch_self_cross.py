"""attnlib.torch self/cross attention, hard attention and positions (lesson 03)."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.torch as at

pytestmark = pytest.mark.lesson03

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=30, deadline=None)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


# ------------------------------------------------------------------------ self/cross attention


@FAST
@given(seed=SEEDS, B=st.integers(1, 3), T=st.integers(1, 7), causal=st.booleans())
def test_self_attention_matches_sdpa(seed: int, B: int, T: int, causal: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    X = randn(gen, B, T, 5)
    W_q, W_k, W_v = randn(gen, 5, 3), randn(gen, 5, 3), randn(gen, 5, 4)
    mask = at.causal_mask(T) if causal else None
    out, weights = at.self_attention(X, W_q, W_k, W_v, mask)
    expected = F.scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v, is_causal=causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    assert weights.shape == (B, T, T)


@FAST
@given(seed=SEEDS, T=st.integers(1, 8), data=st.data())
def test_self_attention_is_permutation_equivariant(seed: int, T: int, data) -> None:
    perm = torch.tensor(data.draw(st.permutations(range(T))))
    gen = torch.Generator().manual_seed(seed)
    X = randn(gen, 2, T, 4)
    W_q, W_k, W_v = randn(gen, 4, 3), randn(gen, 4, 3), randn(gen, 4, 2)
    out, weights = at.self_attention(X, W_q, W_k, W_v)
    out_p, weights_p = at.self_attention(X[:, perm], W_q, W_k, W_v)
    torch.testing.assert_close(out_p, out[:, perm], rtol=0, atol=1e-12)
    torch.testing.assert_close(weights_p, weights[:, perm][:, :, perm], rtol=0, atol=1e-12)


@FAST
@given(seed=SEEDS, T=st.integers(2, 8), t=st.integers(0, 6))
def test_causal_self_attention_ignores_the_future(seed: int, T: int, t: int) -> None:
    t = t % (T - 1)
    gen = torch.Generator().manual_seed(seed)
    X = randn(gen, 1, T, 4)
    W_q, W_k, W_v = randn(gen, 4, 3), randn(gen, 4, 3), randn(gen, 4, 2)
    X2 = X.clone()
    X2[:, t + 1 :] = randn(gen, 1, T - t - 1, 4) * 5
    out, _ = at.self_attention(X, W_q, W_k, W_v, at.causal_mask(T))
    out2, _ = at.self_attention(X2, W_q, W_k, W_v, at.causal_mask(T))
    torch.testing.assert_close(out[:, : t + 1], out2[:, : t + 1], rtol=0, atol=1e-12)


def test_cross_attention_matches_sdpa_with_padding() -> None:
    gen = torch.Generator().manual_seed(0)
    Y, H = randn(gen, 3, 4, 5), randn(gen, 3, 6, 7)  # decoder width 5, encoder width 7
    W_q, W_k, W_v = randn(gen, 5, 8), randn(gen, 7, 8), randn(gen, 7, 2)
    mask = at.padding_mask([6, 2, 4], 6)
    out, weights = at.cross_attention(Y, H, W_q, W_k, W_v, mask)
    expected = F.scaled_dot_product_attention(Y @ W_q, H @ W_k, H @ W_v, attn_mask=mask)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    assert weights.shape == (3, 4, 6)
    assert torch.equal(weights[1, :, 2:], torch.zeros(4, 4, dtype=F64))


def test_projection_gradients_match_sdpa() -> None:
    gen = torch.Generator().manual_seed(1)
    Y, H = randn(gen, 2, 3, 4), randn(gen, 2, 5, 4)
    Ws = [randn(gen, 4, 4).requires_grad_() for _ in range(3)]
    out, _ = at.cross_attention(Y, H, *Ws)
    expected = F.scaled_dot_product_attention(Y @ Ws[0], H @ Ws[1], H @ Ws[2])
    g = randn(gen, *out.shape)
    for mine, theirs in zip(
        torch.autograd.grad(out, Ws, g), torch.autograd.grad(expected, Ws, g), strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    ("shapes", "msg"),
    [
        ({"W_q": (4, 3)}, "W_q (4, 3) expects inputs with 4 features, but they have 5"),
        ({"W_v": (5, 2, 1)}, "W_v (5, 2, 1) has 3 axes; expected 2: (d_X, d_v) for X"),
        ({"W_k": (5, 2)}, "W_q (5, 3) and W_k (5, 2) disagree on d_k (3 vs 2)"),
        ({"X": (5,)}, "X (5,) has 1 axes; expected at least 2: (..., T, d_model)"),
    ],
)
def test_self_attention_shape_errors(shapes: dict, msg: str) -> None:
    args = {"X": (2, 4, 5), "W_q": (5, 3), "W_k": (5, 3), "W_v": (5, 2)}
    args.update(shapes)
    tensors = [torch.zeros(s, dtype=F64) for s in args.values()]
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.self_attention(*tensors)


def test_cross_attention_shape_errors() -> None:
    Y, H = torch.zeros(2, 4, 5), torch.zeros(2, 6, 7)
    W_q, W_k, W_v = torch.zeros(5, 3), torch.zeros(7, 3), torch.zeros(7, 2)
    msg = "W_k (5, 3) expects inputs with 5 features, but they have 7; expected (d_H, d_k) for H"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.cross_attention(Y, H, W_q, torch.zeros(5, 3), W_v)
    with pytest.raises(ValueError, match=re.escape("mask (2, 1, 5) cannot broadcast")):
        at.cross_attention(Y, H, W_q, W_k, W_v, at.padding_mask([5, 2], 5))
    with pytest.raises(ValueError, match="H has dtype torch.int64; attention needs floating"):
        at.cross_attention(Y, H.long(), W_q, W_k, W_v)


# --------------------------------------------------------------------------------- hard attention


def argmax_first(row: list[float], allowed: list[bool]) -> int | None:
    """Index of the largest allowed score, the first one on ties; None if nothing is allowed."""
    best = None
    for j, (s, ok) in enumerate(zip(row, allowed, strict=True)):
        if ok and (best is None or s > row[best]):
            best = j
    return best


@st.composite
def hard_cases(draw: st.DrawFn):
    """Small integer-valued Q and K, so equal scores (ties) are common.

    d = 4 makes the scale 1/sqrt(d) = 1/2 exact, so every score is computed without rounding and
    ties in the reference are ties in the implementation.
    """
    gen = torch.Generator().manual_seed(draw(SEEDS))
    B, m, n, d = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6)), 4
    Q = torch.randint(-2, 3, (B, m, d), generator=gen).to(F64)
    K = torch.randint(-2, 3, (B, n, d), generator=gen).to(F64)
    V = randn(gen, B, n, 3)
    mask = None
    if draw(st.booleans()):
        mask = torch.rand(B, m, n, generator=gen) < draw(st.sampled_from([0.2, 0.6]))
    return Q, K, V, mask


@FAST
@given(case=hard_cases())
def test_hard_attention_picks_the_first_best_allowed_key(case) -> None:
    Q, K, V, mask = case
    out, weights = at.hard_attention(Q, K, V, mask)
    scores = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).tolist()
    full = torch.ones(weights.shape, dtype=torch.bool) if mask is None else mask
    for b in range(Q.shape[0]):
        for i in range(Q.shape[1]):
            j = argmax_first(scores[b][i], full[b, i].tolist())
            expected = torch.zeros(K.shape[1], dtype=F64)
            if j is not None:
                expected[j] = 1.0
            assert torch.equal(weights[b, i], expected), (b, i, j)
            assert torch.equal(out[b, i], V[b, j] if j is not None else torch.zeros(3, dtype=F64))


def test_hard_attention_tie_goes_to_the_first_key() -> None:
    Q = torch.tensor([[1.0, 0.0]], dtype=F64)
    K = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=F64)  # keys 1 and 2 tie
    V = torch.eye(3, dtype=F64)
    _, weights = at.hard_attention(Q, K, V)
    assert weights.tolist() == [[0.0, 1.0, 0.0]]
    _, weights = at.hard_attention(Q, K, V, torch.tensor([[True, False, True]]))
    assert weights.tolist() == [[0.0, 0.0, 1.0]]


def test_hard_attention_gradients_flow_to_values_only() -> None:
    gen = torch.Generator().manual_seed(2)
    Q, K, V = (randn(gen, 2, 4, 3).requires_grad_() for _ in range(3))
    out, weights = at.hard_attention(Q, K, V)
    assert not weights.requires_grad
    (gV,) = torch.autograd.grad(out.sum(), V)
    # each value gets gradient d_v times the number of queries that picked it
    torch.testing.assert_close(gV, weights.transpose(-2, -1).sum(-1, keepdim=True).expand(2, 4, 3))


@FAST
@given(case=hard_cases(), seed=SEEDS)
def test_sampled_hard_attention_draws_only_allowed_keys(case, seed: int) -> None:
    Q, K, V, mask = case
    gen = torch.Generator().manual_seed(seed)
    out, weights = at.sampled_hard_attention(Q, K, V, mask, generator=gen)
    full = torch.ones(weights.shape, dtype=torch.bool) if mask is None else mask
    has_key = full.any(-1)
    assert torch.equal(weights.sum(-1), has_key.to(F64))  # one-hot or zero rows
    assert torch.equal(weights[~full], torch.zeros_like(weights[~full]))
    torch.testing.assert_close(out, weights @ V, rtol=0, atol=0)


def test_sampled_hard_attention_is_reproducible_with_a_generator() -> None:
    gen = torch.Generator().manual_seed(3)
    Q, K, V = randn(gen, 50, 4), randn(gen, 6, 4), randn(gen, 6, 2)
    first = at.sampled_hard_attention(Q, K, V, generator=torch.Generator().manual_seed(9))
    second = at.sampled_hard_attention(Q, K, V, generator=torch.Generator().manual_seed(9))
    assert torch.equal(first[1], second[1])


def test_sampled_hard_attention_follows_the_softmax_distribution() -> None:
    gen = torch.Generator().manual_seed(4)
    K, V = randn(gen, 4, 3), randn(gen, 4, 2)
    q = randn(gen, 1, 3)
    draws = 20_000
    Q = q.expand(draws, 3)  # the same query many times
    mask = torch.tensor([True, True, False, True])
    _, weights = at.sampled_hard_attention(Q, K, V, mask, generator=gen)
    frequencies = weights.mean(0)
    _, soft = at.attention(q, K, V, mask)
    # binomial standard error is below 0.004 here; 0.02 is five of them
    torch.testing.assert_close(frequencies, soft[0], rtol=0, atol=0.02)
    assert frequencies[2] == 0


def test_hard_attention_fully_masked_rows_are_zero() -> None:
    gen = torch.Generator().manual_seed(5)
    Q, K, V = randn(gen, 3, 2), randn(gen, 4, 2), randn(gen, 4, 2)
    mask = torch.tensor([[True] * 4, [False] * 4, [False, True, False, False]])
    for fn in (at.hard_attention, at.sampled_hard_attention):
        out, weights = fn(Q, K, V, mask)
        assert torch.equal(out[1], torch.zeros(2, dtype=F64))
        assert torch.equal(weights[1], torch.zeros(4, dtype=F64))
        assert weights[2].tolist() == [0.0, 1.0, 0.0, 0.0]


def test_hard_attention_errors() -> None:
    Q, K, V = torch.zeros(3, 2), torch.zeros(4, 2), torch.zeros(4, 2)
    with pytest.raises(ValueError, match=re.escape("K (4, 2) and V (5, 2) disagree on the")):
        at.hard_attention(Q, K, torch.zeros(5, 2))
    with pytest.raises(ValueError, match=re.escape("mask (3, 4) has dtype torch.int64")):
        at.sampled_hard_attention(Q, K, V, torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        at.sampled_hard_attention(Q, K, V, generator=42)


# ---------------------------------------------------------------------------- positional encoding


@pytest.mark.parametrize(("T", "d_model"), [(1, 1), (5, 4), (7, 5), (50, 16)])
def test_sinusoidal_encoding_follows_the_formula(T: int, d_model: int) -> None:
    pe = at.sinusoidal_encoding(T, d_model, dtype=F64)
    assert pe.shape == (T, d_model) and pe.dtype == F64
    for p in range(T):
        for c in range(d_model):
            i = c // 2
            angle = p / 10000 ** (2 * i / d_model)
            expected = math.sin(angle) if c % 2 == 0 else math.cos(angle)
            assert abs(pe[p, c].item() - expected) < 1e-12, (p, c)


def test_sinusoidal_encoding_dtype_and_device() -> None:
    assert at.sinusoidal_encoding(4, 6).dtype == torch.float32
    assert at.sinusoidal_encoding(4, 6, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert at.sinusoidal_encoding(4, 6, device="meta").device.type == "meta"
    assert at.sinusoidal_encoding(0, 6).shape == (0, 6)


def test_sinusoidal_encoding_relative_positions_are_rotations() -> None:
    """PE[p + k] is PE[p] rotated pair by pair by angles that depend only on k."""
    pe = at.sinusoidal_encoding(20, 8, dtype=F64)
    k = 3
    for p in (0, 5, 11):
        for i in range(4):
            theta = k / 10000 ** (2 * i / 8)
            s, c = pe[p, 2 * i], pe[p, 2 * i + 1]
            rotated = torch.stack(
                [
                    s * math.cos(theta) + c * math.sin(theta),
                    c * math.cos(theta) - s * math.sin(theta),
                ]
            )
            torch.testing.assert_close(pe[p + k, 2 * i : 2 * i + 2], rotated, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"T": -1, "d_model": 4}, "T must be a non-negative integer, got -1"),
        ({"T": 3, "d_model": 0}, "d_model must be a positive integer, got 0"),
        ({"T": 3.0, "d_model": 4}, "T must be a non-negative integer, got 3.0"),
        ({"T": 3, "d_model": 4, "dtype": torch.int64}, "dtype must be a floating-point"),
    ],
)
def test_sinusoidal_encoding_errors(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.sinusoidal_encoding(**kwargs)
