"""attnlib.torch heads, multi-head attention and MultiHeadAttention (lesson 04).

The oracle is torch.nn.MultiheadAttention(batch_first=True) in float64.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attnlib.torch as at

pytestmark = pytest.mark.lesson04

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=25, deadline=None)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


# ---------------------------------------------------------------------------- split / merge


@FAST
@given(
    seed=SEEDS, B=st.integers(1, 3), T=st.integers(1, 5), h=st.integers(1, 4), d=st.integers(1, 4)
)
def test_split_heads_takes_consecutive_columns_and_merge_inverts(seed, B, T, h, d) -> None:
    X = randn(torch.Generator().manual_seed(seed), B, T, h * d)
    heads = at.split_heads(X, h)
    assert heads.shape == (B, h, T, d)
    for i in range(h):
        assert torch.equal(heads[:, i], X[:, :, i * d : (i + 1) * d])
    assert torch.equal(at.merge_heads(heads), X)
    Y = randn(torch.Generator().manual_seed(seed + 1), B, h, T, d)
    assert torch.equal(at.split_heads(at.merge_heads(Y), h), Y)


def test_split_heads_errors() -> None:
    msg = "X (2, 3, 10) has 10 features, which 4 heads cannot split evenly (10 % 4 = 2)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.split_heads(torch.zeros(2, 3, 10), 4)
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="num_heads must be a positive int"):
            at.split_heads(torch.zeros(2, 3, 8), bad)
    with pytest.raises(ValueError, match=re.escape("X (8,) has 1 axes; expected at least 2")):
        at.split_heads(torch.zeros(8), 2)
    with pytest.raises(ValueError, match=re.escape("X (3, 8) has 2 axes; expected at least 3")):
        at.merge_heads(torch.zeros(3, 8))


# ------------------------------------------------------------------- multi_head_attention


def projections(gen: torch.Generator, d_model: int, d_kv: int, width: int):
    return (
        randn(gen, d_model, width),
        randn(gen, d_kv, width),
        randn(gen, d_kv, width),
        randn(gen, width, d_model),
    )


@FAST
@given(
    seed=SEEDS,
    B=st.integers(1, 3),
    T_q=st.integers(1, 5),
    T_kv=st.integers(1, 5),
    h=st.integers(1, 3),
    d_head=st.integers(1, 3),
    masked=st.booleans(),
)
def test_multi_head_is_attention_per_column_block(seed, B, T_q, T_kv, h, d_head, masked) -> None:
    gen = torch.Generator().manual_seed(seed)
    X_q, X_kv = randn(gen, B, T_q, 5), randn(gen, B, T_kv, 3)
    W_q, W_k, W_v, W_o = projections(gen, 5, 3, h * d_head)
    W_o = randn(gen, h * d_head, 5)
    mask = (
        at.padding_mask(torch.randint(1, T_kv + 1, (B,), generator=gen), T_kv) if masked else None
    )
    out, weights = at.multi_head_attention(X_q, X_kv, W_q, W_k, W_v, W_o, h, mask)
    assert out.shape == (B, T_q, 5) and weights.shape == (B, h, T_q, T_kv)
    per_head = []
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        o, w = at.attention(X_q @ W_q[:, cols], X_kv @ W_k[:, cols], X_kv @ W_v[:, cols], mask)
        torch.testing.assert_close(weights[:, i], w, rtol=0, atol=1e-12)
        per_head.append(o)
    expected = torch.cat(per_head, dim=-1) @ W_o
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


def test_multi_head_scales_by_sqrt_d_head() -> None:
    gen = torch.Generator().manual_seed(0)
    X = randn(gen, 1, 4, 8)
    W_q, W_k, W_v, W_o = projections(gen, 8, 8, 8)
    _, weights = at.multi_head_attention(X, X, W_q, W_k, W_v, W_o, 2)
    Q0, K0 = (X @ W_q)[..., :4], (X @ W_k)[..., :4]
    expected = torch.softmax(Q0 @ K0.transpose(-2, -1) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(weights[:, 0], expected, rtol=0, atol=1e-12)


def test_padding_mask_is_shared_by_heads_when_batch_differs_from_heads() -> None:
    """(B, 1, T) masks get a head axis; broadcasting them raw would line B up with h."""
    gen = torch.Generator().manual_seed(1)
    B, h, T = 2, 3, 4
    X = randn(gen, B, T, 6)
    W_q, W_k, W_v, W_o = projections(gen, 6, 6, 6)
    mask = at.padding_mask([4, 1], T)
    _, weights = at.multi_head_attention(X, X, W_q, W_k, W_v, W_o, h, mask)
    assert torch.equal(weights[1, :, :, 1:], torch.zeros(h, T, T - 1, dtype=F64))
    _, weights4 = at.multi_head_attention(X, X, W_q, W_k, W_v, W_o, h, mask[:, None])
    torch.testing.assert_close(weights4, weights, rtol=0, atol=0)


def test_per_head_masks() -> None:
    gen = torch.Generator().manual_seed(2)
    X = randn(gen, 2, 4, 6)
    W_q, W_k, W_v, W_o = projections(gen, 6, 6, 6)
    mask = torch.ones(1, 3, 4, 4, dtype=torch.bool)
    mask[0, 1] = at.causal_mask(4)  # only head 1 is causal
    _, weights = at.multi_head_attention(X, X, W_q, W_k, W_v, W_o, 3, mask)
    assert torch.equal(weights[:, 1].triu(1), torch.zeros(2, 4, 4, dtype=F64))
    assert (weights[:, 0].triu(1) > 0).any()


@pytest.mark.parametrize(
    ("change", "msg"),
    [
        ({"num_heads": 4}, "W_q (6, 6) has 6 features, which 4 heads cannot split evenly"),
        ({"W_q": (5, 6)}, "W_q (5, 6) expects inputs with 5 features, but they have 6"),
        ({"W_k": (6, 4)}, "W_q (6, 6) and W_k (6, 4) disagree on h*d_head (6 vs 4)"),
        ({"W_v": (6, 4), "W_o": (4, 6)}, "W_v (6, 4) has 4 features, which 3 heads cannot split"),
        ({"W_o": (4, 6)}, "W_o (4, 6) expects inputs with 4 features, but they have 6"),
        ({"X_kv": (3, 5, 6)}, "X_q (2, 4, 6) and X_kv (3, 5, 6) disagree on the batch size B"),
        ({"X_q": (4, 6)}, "X_q (4, 6) has 2 axes; expected 3: (B, T_q, d_model)"),
        ({"mask": (2, 4, 4)}, "mask (2, 1, 4, 4) cannot broadcast to the scores (2, 3, 4, 5)"),
        ({"mask": (2, 2, 4, 5)}, "mask (2, 2, 4, 5) cannot broadcast to the scores (2, 3, 4, 5)"),
        ({"W_q": (6, 0), "W_k": (6, 0)}, "W_q (6, 0) has no columns; each head needs d_head >= 1"),
        ({"mask": "int"}, "mask (4, 5) has dtype torch.int64; a mask must be a boolean tensor"),
    ],
)
def test_multi_head_errors(change: dict, msg: str) -> None:
    shapes = {"X_q": (2, 4, 6), "X_kv": (2, 5, 6), "W_q": (6, 6), "W_k": (6, 6)}
    shapes |= {"W_v": (6, 6), "W_o": (6, 6)}
    num_heads = change.pop("num_heads", 3)
    mask_shape = change.pop("mask", None)
    shapes.update(change)
    args = [torch.zeros(s, dtype=F64) for s in shapes.values()]
    if mask_shape == "int":
        mask = torch.ones(4, 5, dtype=torch.int64)
    else:
        mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.multi_head_attention(*args, num_heads, mask)


# ------------------------------------------------------------- MultiHeadAttention vs nn.MHA


def torch_mha(seed: int, d: int, h: int, bias: bool) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention with seeded random weights (and non-zero biases)."""
    mha = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=F64).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in mha.parameters():
            param.copy_(randn(gen, *param.shape) / math.sqrt(d))
    return mha


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_from_torch_matches_nn_multihead_attention(bias: bool, cross: bool, padded: bool) -> None:
    B, T_q, T_kv, d, h = 3, 4, 6 if cross else 4, 8, 2
    mha = torch_mha(0, d, h, bias)
    mine = at.MultiHeadAttention.from_torch(mha)
    gen = torch.Generator().manual_seed(1)
    x_q = randn(gen, B, T_q, d)
    x_kv = randn(gen, B, T_kv, d) if cross else x_q
    kpm = None
    if padded:
        kpm = ~at.padding_mask([T_kv, 2, 1], T_kv)[:, 0]  # True = ignore
    mask = None if kpm is None else at.from_key_padding_mask(kpm)

    expected, avg = mha(x_q, x_kv, x_kv, key_padding_mask=kpm)
    _, per_head = mha(x_q, x_kv, x_kv, key_padding_mask=kpm, average_attn_weights=False)
    out, weights = mine(x_q, None if not cross else x_kv, mask=mask)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(weights, per_head, rtol=0, atol=1e-10)
    torch.testing.assert_close(weights.mean(1), avg, rtol=0, atol=1e-10)

    fast, none = mine(x_q, None if not cross else x_kv, mask=mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected, rtol=0, atol=1e-10)


def test_from_torch_matches_with_causal_attn_mask() -> None:
    mha = torch_mha(2, 6, 3, True)
    mine = at.MultiHeadAttention.from_torch(mha)
    x = randn(torch.Generator().manual_seed(3), 2, 5, 6)
    # nn.MultiheadAttention's boolean attn_mask means True = NOT allowed
    expected, _ = mha(x, x, x, attn_mask=~at.causal_mask(5))
    for need_weights in (True, False):
        out, _ = mine(x, mask=at.causal_mask(5), need_weights=need_weights)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("bias", [False, True])
def test_parameter_gradients_match_nn_multihead_attention(bias: bool) -> None:
    d = 6
    mha = torch_mha(4, d, 3, bias)
    mine = at.MultiHeadAttention.from_torch(mha)
    gen = torch.Generator().manual_seed(5)
    x_q, x_kv = randn(gen, 2, 3, d), randn(gen, 2, 5, d)
    kpm = torch.tensor([[False] * 5, [False, False, False, True, True]])
    g = randn(gen, 2, 3, d)
    expected, _ = mha(x_q, x_kv, x_kv, key_padding_mask=kpm)
    out, _ = mine(x_q, x_kv, mask=at.from_key_padding_mask(kpm))
    (expected * g).sum().backward()
    (out * g).sum().backward()
    w = mha.in_proj_weight.grad
    torch.testing.assert_close(mine.W_q.grad, w[:d].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(mine.W_k.grad, w[d : 2 * d].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(mine.W_v.grad, w[2 * d :].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(mine.W_o.grad, mha.out_proj.weight.grad.T, rtol=0, atol=1e-10)
    if bias:
        b = mha.in_proj_bias.grad
        torch.testing.assert_close(mine.b_q.grad, b[:d], rtol=0, atol=1e-10)
        torch.testing.assert_close(mine.b_k.grad, b[d : 2 * d], rtol=0, atol=1e-10)
        torch.testing.assert_close(mine.b_v.grad, b[2 * d :], rtol=0, atol=1e-10)
        torch.testing.assert_close(mine.b_o.grad, mha.out_proj.bias.grad, rtol=0, atol=1e-10)


def test_from_torch_copies_rather_than_shares() -> None:
    mha = torch_mha(6, 4, 2, True)
    mine = at.MultiHeadAttention.from_torch(mha)
    with torch.no_grad():
        mine.W_q.zero_()
    assert mha.in_proj_weight.abs().sum() > 0
    assert mine.W_q.dtype == F64 and mine.W_q.device == mha.in_proj_weight.device


def test_module_shapes_and_parameters() -> None:
    module = at.MultiHeadAttention(12, 4)
    names = {name for name, _ in module.named_parameters()}
    assert names == {"W_q", "W_k", "W_v", "W_o"}
    assert module.b_q is None
    with_bias = at.MultiHeadAttention(12, 4, bias=True)
    assert {name for name, _ in with_bias.named_parameters()} == names | {
        "b_q",
        "b_k",
        "b_v",
        "b_o",
    }
    gen = torch.Generator().manual_seed(7)
    x = randn(gen, 2, 5, 12, dtype=torch.float32)
    out, weights = with_bias(x, randn(gen, 2, 7, 12, dtype=torch.float32))
    assert out.shape == (2, 5, 12) and weights.shape == (2, 4, 5, 7)
    assert out.dtype == torch.float32


def test_module_errors() -> None:
    with pytest.raises(ValueError, match="d_model has 10 features, which 4 heads cannot split"):
        at.MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="from_torch takes an nn.MultiheadAttention"):
        at.MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="kdim=3, vdim=3 different from embed_dim=4"):
        at.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, kdim=3, vdim=3))
    with pytest.raises(ValueError, match="add_bias_kv or add_zero_attn"):
        at.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True))
    module = at.MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match="X_q has dtype torch.float32 but X_kv has dtype"):
        module(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4, dtype=F64))


def test_multi_head_bias_errors() -> None:
    X, W = torch.zeros(1, 2, 4), torch.zeros(4, 4)
    with pytest.raises(ValueError, match=re.escape("b_k (3,) must have 4 entries, one per column")):
        at.multi_head_attention(X, X, W, W, W, W, 2, b_k=torch.zeros(3))
    with pytest.raises(ValueError, match=re.escape("b_o (1, 4) has 2 axes; expected 1: (4,)")):
        at.multi_head_attention(X, X, W, W, W, W, 2, b_o=torch.zeros(1, 4))
    with pytest.raises(ValueError, match="b_q has dtype torch.int64; attention needs floating"):
        at.multi_head_attention(X, X, W, W, W, W, 2, b_q=torch.zeros(4, dtype=torch.int64))
