"""attnlib.torch softmax and masked_softmax (lesson 02) against torch.softmax."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.torch as at

pytestmark = pytest.mark.lesson02

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=30, deadline=None)
SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


@FAST
@given(seed=SEEDS, shape=SHAPES, data=st.data(), scale=st.sampled_from([1.0, 30.0, 1e3]))
def test_softmax_matches_torch_on_any_axis(seed: int, shape: list[int], data, scale: float) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = randn(torch.Generator().manual_seed(seed), *shape) * scale
    torch.testing.assert_close(
        at.softmax(x, axis=axis), torch.softmax(x, dim=axis), atol=1e-12, rtol=0
    )


@FAST
@given(seed=SEEDS, shape=SHAPES, temperature=st.floats(0.05, 20.0))
def test_softmax_temperature_divides_the_logits(seed: int, shape, temperature: float) -> None:
    x = randn(torch.Generator().manual_seed(seed), *shape)
    expected = torch.softmax(x / temperature, dim=-1)
    torch.testing.assert_close(at.softmax(x, temperature=temperature), expected, atol=1e-12, rtol=0)


def test_softmax_default_axis_is_the_last() -> None:
    x = randn(torch.Generator().manual_seed(0), 3, 4)
    weights = at.softmax(x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=F64), atol=1e-12, rtol=0)
    assert not torch.allclose(weights.sum(0), torch.ones(4, dtype=F64))


def test_softmax_gradient_matches_torch() -> None:
    x = randn(torch.Generator().manual_seed(1), 3, 5).requires_grad_()
    g = randn(torch.Generator().manual_seed(2), 3, 5)
    (mine,) = torch.autograd.grad(at.softmax(x, axis=0), x, g)
    (theirs,) = torch.autograd.grad(torch.softmax(x, dim=0), x, g)
    torch.testing.assert_close(mine, theirs, atol=1e-12, rtol=0)


@st.composite
def scores_and_mask(draw: st.DrawFn):
    gen = torch.Generator().manual_seed(draw(SEEDS))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    m, n = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    scores = randn(gen, *batch, m, n) * draw(st.sampled_from([1.0, 100.0]))
    # the mask may drop leading axes or have size-1 axes that broadcast
    mask_shape = [draw(st.sampled_from([b, 1])) for b in batch][draw(st.integers(0, len(batch))) :]
    mask_shape += [draw(st.sampled_from([m, 1])), n]
    mask = torch.rand(mask_shape, generator=gen) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    return scores, mask


@FAST
@given(case=scores_and_mask())
def test_masked_softmax_invariants(case) -> None:
    scores, mask = case
    weights = at.masked_softmax(scores, mask)
    full = mask.expand(scores.shape)
    # masked keys get exactly zero
    assert torch.equal(weights[~full], torch.zeros_like(weights[~full]))
    # rows with an allowed key sum to one, rows without are all zeros
    has_key = full.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), atol=1e-12, rtol=0)
    assert torch.equal(weights[~has_key], torch.zeros_like(weights[~has_key]))
    # and on the allowed keys it is torch's softmax
    expected = torch.softmax(scores.masked_fill(~full, float("-inf")), dim=-1)
    torch.testing.assert_close(weights[has_key], expected[has_key], atol=1e-12, rtol=0)


def test_masked_softmax_without_mask_is_softmax() -> None:
    x = randn(torch.Generator().manual_seed(3), 2, 3, 4)
    torch.testing.assert_close(at.masked_softmax(x), torch.softmax(x, -1), atol=1e-12, rtol=0)


def test_fully_masked_row_is_zero_with_zero_gradient() -> None:
    scores = randn(torch.Generator().manual_seed(4), 3, 5).requires_grad_()
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    weights = at.masked_softmax(scores, mask)
    assert torch.equal(weights[1], torch.zeros(5, dtype=F64))
    (grad,) = torch.autograd.grad(weights, scores, torch.ones_like(weights) * 3.0)
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[1], torch.zeros(5, dtype=F64))


def test_softmax_of_all_minus_inf_row_is_zero() -> None:
    x = torch.tensor([[float("-inf")] * 3, [0.0, 1.0, 2.0]], dtype=F64)
    weights = at.softmax(x)
    assert torch.equal(weights[0], torch.zeros(3, dtype=F64))
    torch.testing.assert_close(weights[1], torch.softmax(x[1], -1), atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- 16-bit precision

# 16-bit results are compared with float64 on the same rounded inputs, within these tolerances.
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_softmax_finite_at_extreme_logits(dtype: torch.dtype) -> None:
    x = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, -1e4]], dtype=dtype)
    mask = torch.tensor([[True, True, True], [True, False, True], [True, True, False]])
    for weights in (at.softmax(x), at.masked_softmax(x, mask), at.softmax(x, axis=0)):
        assert weights.dtype == dtype
        assert torch.isfinite(weights).all()
    expected = torch.softmax(x.to(F64), -1)
    torch.testing.assert_close(at.softmax(x).to(F64), expected, atol=TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_softmax_close_to_float64(dtype: torch.dtype) -> None:
    x = (randn(torch.Generator().manual_seed(5), 4, 7, 33) * 4).to(dtype)
    mask = torch.rand(4, 1, 33, generator=torch.Generator().manual_seed(6)) < 0.6
    got = at.masked_softmax(x, mask)
    assert got.dtype == dtype
    expected = at.masked_softmax(x.to(F64), mask)
    torch.testing.assert_close(got.to(F64), expected, atol=TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_softmax_is_correctly_rounded(dtype: torch.dtype) -> None:
    """Computing in float32 and rounding once gives every weight within half an ulp of the
    exact value; exponentiating and dividing in 16 bits would be off by several ulps."""
    x = (randn(torch.Generator().manual_seed(7), 64, 50) * 3).to(dtype)
    exact = torch.softmax(x.to(F64), dim=-1)
    got = at.softmax(x).to(F64)
    info = torch.finfo(dtype)
    smallest = info.smallest_normal * info.eps  # spacing of the subnormals
    assert ((got - exact).abs() <= info.eps * exact.abs() + smallest).all()


# ------------------------------------------------------------------------------------- errors


def test_error_axis_out_of_range() -> None:
    with pytest.raises(ValueError, match=re.escape("axis 2 is out of range for x (3, 4) (2 axes)")):
        at.softmax(torch.zeros(3, 4), axis=2)


def test_error_scalar() -> None:
    with pytest.raises(ValueError, match=re.escape("x () is a scalar")):
        at.softmax(torch.tensor(1.0))
    with pytest.raises(ValueError, match=re.escape("scores () is a scalar")):
        at.masked_softmax(torch.tensor(1.0))


@pytest.mark.parametrize("temperature", [0, -1.0, float("inf"), float("nan"), None])
def test_error_bad_temperature(temperature) -> None:
    with pytest.raises(ValueError, match="temperature must be a positive finite number"):
        at.softmax(torch.zeros(3), temperature=temperature)


def test_error_integer_input() -> None:
    with pytest.raises(ValueError, match="x has dtype torch.int64; attention needs floating"):
        at.softmax(torch.arange(3))
    with pytest.raises(ValueError, match="scores has dtype torch.int64; attention needs"):
        at.masked_softmax(torch.arange(3))


def test_error_mask_not_broadcastable() -> None:
    msg = "mask (3, 4) cannot broadcast to the scores (2, 3, 5)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.masked_softmax(torch.zeros(2, 3, 5), torch.ones(3, 4, dtype=torch.bool))


def test_error_mask_would_grow_the_scores() -> None:
    msg = "mask (2, 3, 5) cannot broadcast to the scores (3, 5)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.masked_softmax(torch.zeros(3, 5), torch.ones(2, 3, 5, dtype=torch.bool))


def test_error_additive_mask_points_to_converter() -> None:
    additive = torch.zeros(3, 5)
    with pytest.raises(ValueError, match=r"mask \(3, 5\) has dtype torch.float32.*from_additive"):
        at.masked_softmax(torch.zeros(3, 5), additive)
