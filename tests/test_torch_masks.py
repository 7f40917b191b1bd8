"""attnlib.torch masks and mask converters (lesson 02)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.torch as at

pytestmark = pytest.mark.lesson02

F64 = torch.float64
FAST = settings(max_examples=30, deadline=None)


@given(T=st.integers(1, 12))
@settings(max_examples=12, deadline=None)
def test_causal_mask_is_lower_triangular(T: int) -> None:
    mask = at.causal_mask(T)
    assert mask.dtype == torch.bool and mask.shape == (T, T)
    for i in range(T):
        for j in range(T):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_on_a_device() -> None:
    assert at.causal_mask(3, device="meta").device.type == "meta"


@pytest.mark.parametrize("T", [0, -1, 2.0, True])
def test_causal_mask_error(T) -> None:
    with pytest.raises(ValueError, match="T must be a positive integer"):
        at.causal_mask(T)


@FAST
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), extra=st.integers(0, 3))
def test_padding_mask_marks_real_keys(lengths: list[int], extra: int) -> None:
    max_len = max(lengths) + extra
    for given_lengths in (lengths, tuple(lengths), torch.tensor(lengths), np.array(lengths)):
        mask = at.padding_mask(given_lengths, max_len)
        assert mask.dtype == torch.bool and mask.shape == (len(lengths), 1, max_len)
        for b, length in enumerate(lengths):
            assert mask[b, 0].tolist() == [j < length for j in range(max_len)]


def test_padding_mask_follows_the_lengths_device() -> None:
    mask = at.padding_mask(torch.tensor([1, 2], device="cpu"), 3)
    assert mask.device.type == "cpu"
    assert at.padding_mask([1, 2], 3, device="meta").device.type == "meta"


def test_padding_mask_hides_padding_from_attention() -> None:
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 4, 3, generator=gen, dtype=F64) for _ in range(3))
    mask = at.padding_mask([2, 4], 4)
    out, _ = at.attention(Q, K, V, mask)
    # batch 0 only has keys 0 and 1: attention over the truncated sequence is the same
    trimmed = F.scaled_dot_product_attention(Q[:1], K[:1, :2], V[:1, :2])
    torch.testing.assert_close(out[:1], trimmed, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("lengths", "max_len", "msg"),
    [
        ([1, 7], 5, "lengths[1] = 7 is outside [0, max_len] = [0, 5]"),
        ([-1, 2], 5, "lengths[0] = -1 is outside [0, max_len] = [0, 5]"),
        ([1.0, 2.0], 5, "lengths (2,) of dtype torch.float32 must be a 1-D array of integers"),
        ([[1, 2]], 5, "lengths (1, 2) of dtype torch.int64 must be a 1-D array of integers"),
        (torch.tensor([True]), 5, "lengths (1,) of dtype torch.bool must be a 1-D array"),
        ([1, 2], -1, "max_len must be a non-negative integer, got -1"),
        (["a"], 5, "lengths must be a 1-D sequence of integers"),
    ],
)
def test_padding_mask_errors(lengths, max_len, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.padding_mask(lengths, max_len)


def test_empty_batch_of_lengths() -> None:
    assert at.padding_mask([], 3).shape == (0, 1, 3)


# ------------------------------------------------------------------------------- converters


@FAST
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 4), n=st.integers(1, 6))
def test_key_padding_mask_round_trip(seed: int, B: int, n: int) -> None:
    kpm = torch.rand(B, n, generator=torch.Generator().manual_seed(seed)) < 0.5
    keep = at.from_key_padding_mask(kpm)
    assert keep.shape == (B, 1, n) and keep.dtype == torch.bool
    assert torch.equal(keep[:, 0], ~kpm)
    assert torch.equal(at.to_key_padding_mask(keep), kpm)


def test_key_padding_mask_means_the_same_as_in_nn_multihead_attention() -> None:
    gen = torch.Generator().manual_seed(1)
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True, bias=False, dtype=F64).eval()
    x = torch.randn(2, 5, 4, generator=gen, dtype=F64)
    kpm = torch.tensor([[False, False, True, True, True], [False] * 5])
    expected, _ = mha(x, x, x, key_padding_mask=kpm)
    mine = at.MultiHeadAttention.from_torch(mha)
    out, _ = mine(x, mask=at.from_key_padding_mask(kpm))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


@FAST
@given(seed=st.integers(0, 2**31 - 1), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_additive_mask_round_trip_and_meaning(seed: int, shape: list[int]) -> None:
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=gen) < 0.5
    additive = at.to_additive_mask(keep, dtype=F64)
    assert additive.dtype == F64 and additive.shape == keep.shape
    assert torch.equal(additive[keep], torch.zeros_like(additive[keep]))
    assert torch.isneginf(additive[~keep]).all()
    assert torch.equal(at.from_additive_mask(additive), keep)


def test_additive_and_boolean_masks_give_the_same_sdpa() -> None:
    gen = torch.Generator().manual_seed(2)
    Q, K, V = (torch.randn(2, 5, 3, generator=gen, dtype=F64) for _ in range(3))
    keep = torch.rand(2, 5, 5, generator=gen) < 0.6
    keep[..., 0] = True
    via_float = F.scaled_dot_product_attention(Q, K, V, attn_mask=at.to_additive_mask(keep, F64))
    out, _ = at.attention(Q, K, V, keep)
    torch.testing.assert_close(out, via_float, rtol=0, atol=1e-12)


@pytest.mark.parametrize("blocked", [float("-inf"), -1e9, torch.finfo(torch.float32).min])
def test_from_additive_mask_accepts_large_negative_values(blocked: float) -> None:
    m = torch.tensor([[0.0, blocked], [blocked, 0.0]])
    assert torch.equal(at.from_additive_mask(m), torch.tensor([[True, False], [False, True]]))


def test_to_additive_mask_default_dtype_is_float32() -> None:
    assert at.to_additive_mask(torch.tensor([True, False])).dtype == torch.float32


# ------------------------------------------------------------------------------------- errors


def test_from_additive_mask_rejects_biases() -> None:
    m = torch.tensor([[0.0, 0.5], [float("-inf"), 0.0]])
    with pytest.raises(ValueError, match=re.escape("additive mask (2, 2) has 0.5 at (0, 1)")):
        at.from_additive_mask(m)


def test_from_additive_mask_rejects_boolean_masks() -> None:
    with pytest.raises(ValueError, match=r"has dtype torch.bool.*needs no conversion"):
        at.from_additive_mask(torch.tensor([True, False]))


def test_from_key_padding_mask_errors() -> None:
    with pytest.raises(
        ValueError, match=r"key_padding_mask \(2, 3\) has dtype torch.float32.*additive"
    ):
        at.from_key_padding_mask(torch.zeros(2, 3))
    msg = "key_padding_mask (2, 1, 3) has 3 axes; expected 2: (B, n), True = ignore"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.from_key_padding_mask(torch.zeros(2, 1, 3, dtype=torch.bool))


def test_to_key_padding_mask_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("mask (2, 4, 3) differs per query")):
        at.to_key_padding_mask(torch.ones(2, 4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape("mask (2, 3) has 2 axes; expected 3")):
        at.to_key_padding_mask(torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape("mask (2, 1, 3) has dtype torch.int64")):
        at.to_key_padding_mask(torch.ones(2, 1, 3, dtype=torch.int64))


def test_to_additive_mask_errors() -> None:
    with pytest.raises(ValueError, match="dtype must be a floating-point torch.dtype"):
        at.to_additive_mask(torch.ones(2, dtype=torch.bool), dtype=torch.int32)
    with pytest.raises(ValueError, match=re.escape("mask (2,) has dtype torch.float32")):
        at.to_additive_mask(torch.ones(2))
