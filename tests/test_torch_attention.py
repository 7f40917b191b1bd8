"""attnlib.torch.attention against F.scaled_dot_product_attention, plus its invariants."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.torch as at

pytestmark = pytest.mark.lesson02

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=30, deadline=None)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def random_mask(gen: torch.Generator, shape: tuple[int, ...], p: float = 0.5) -> torch.Tensor:
    """Random keep-mask of ``shape`` in which every row has at least one allowed key."""
    mask = torch.rand(shape, generator=gen) < p
    col = torch.randint(shape[-1], (*shape[:-1], 1), generator=gen)
    return mask.scatter(-1, col, True)


# Mask shapes for scores (B, h, m, n); B, h, m, n are drawn distinct-ish so a mask broadcast
# along the wrong axis fails loudly.
MASK_KINDS = ["none", "(m, n)", "(B, 1, 1, n)", "(B, h, m, n)", "(h, m, n)", "(B, 1, m, n)"]


def mask_shape(kind: str, B: int, h: int, m: int, n: int) -> tuple[int, ...]:
    return {
        "(m, n)": (m, n),
        "(B, 1, 1, n)": (B, 1, 1, n),
        "(B, h, m, n)": (B, h, m, n),
        "(h, m, n)": (h, m, n),
        "(B, 1, m, n)": (B, 1, m, n),
    }[kind]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    gen = torch.Generator().manual_seed(draw(SEEDS))
    B, h = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    m, n = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    d_k, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kind = draw(st.sampled_from(MASK_KINDS))
    mask = None if kind == "none" else random_mask(gen, mask_shape(kind, B, h, m, n))
    return {
        "Q": randn(gen, B, h, m, d_k).requires_grad_(),
        "K": randn(gen, B, h, n, d_k).requires_grad_(),
        "V": randn(gen, B, h, n, d_v).requires_grad_(),
        "mask": mask,
        "grad": randn(gen, B, h, m, d_v),
    }


def grads(out: torch.Tensor, c: dict) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, (c["Q"], c["K"], c["V"]), grad_outputs=c["grad"])


# ---------------------------------------------------------------- agreement with PyTorch (oracle)


@FAST
@given(c=cases(), need_weights=st.booleans())
def test_matches_sdpa_forward_and_gradients(c: dict, need_weights: bool) -> None:
    Q, K, V, mask = c["Q"], c["K"], c["V"], c["mask"]
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    out, weights = at.attention(Q, K, V, mask, need_weights=need_weights)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    assert (weights is None) is (not need_weights)
    for mine, theirs in zip(grads(out, c), grads(expected, c), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10)


@FAST
@given(seed=SEEDS, B=st.integers(1, 3), h=st.integers(1, 3), T=st.integers(1, 8))
def test_causal_matches_sdpa_is_causal(seed: int, B: int, h: int, T: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    Q, K, V = (randn(gen, B, h, T, 4).requires_grad_() for _ in range(3))
    expected = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    g = randn(gen, B, h, T, 4)
    want = torch.autograd.grad(expected, (Q, K, V), g)
    for need_weights in (True, False):
        out, _ = at.attention(Q, K, V, at.causal_mask(T), need_weights=need_weights)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
        got = torch.autograd.grad(out, (Q, K, V), g)
        for mine, theirs in zip(got, want, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10)


def test_weights_are_softmax_of_scaled_scores() -> None:
    gen = torch.Generator().manual_seed(0)
    Q, K, V = randn(gen, 2, 3, 5, 4), randn(gen, 2, 3, 6, 4), randn(gen, 2, 3, 6, 2)
    _, weights = at.attention(Q, K, V)
    expected = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-12)


def test_batch_axes_broadcast_like_sdpa() -> None:
    gen = torch.Generator().manual_seed(1)
    Q, K, V = randn(gen, 2, 1, 5, 4), randn(gen, 1, 3, 6, 4), randn(gen, 3, 6, 2)
    mask = random_mask(gen, (2, 1, 1, 6))
    expected = F.scaled_dot_product_attention(
        Q.expand(2, 3, 5, 4), K.expand(2, 3, 6, 4), V.expand(2, 3, 6, 2), attn_mask=mask
    )
    for need_weights in (True, False):
        out, _ = at.attention(Q, K, V, mask, need_weights=need_weights)
        assert out.shape == (2, 3, 5, 2)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


def test_unbatched_2d_inputs() -> None:
    gen = torch.Generator().manual_seed(2)
    Q, K, V = randn(gen, 3, 4), randn(gen, 5, 4), randn(gen, 5, 2)
    expected = F.scaled_dot_product_attention(Q[None], K[None], V[None])[0]
    for need_weights in (True, False):
        out, _ = at.attention(Q, K, V, need_weights=need_weights)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------ the SDPA path


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Record the keyword arguments of every F.scaled_dot_product_attention call."""
    calls: list[dict] = []
    real = F.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("shape", [(6, 6), (1, 6, 6), (1, 1, 6, 6)])
def test_sdpa_path_uses_is_causal_for_the_causal_mask(shape, sdpa_calls) -> None:
    gen = torch.Generator().manual_seed(3)
    Q, K, V = (randn(gen, 2, 3, 6, 4) for _ in range(3))
    at.attention(Q, K, V, at.causal_mask(6).reshape(shape), need_weights=False)
    assert len(sdpa_calls) == 1
    assert sdpa_calls[0].get("is_causal") is True
    assert sdpa_calls[0].get("attn_mask") is None


def test_sdpa_path_passes_other_masks(sdpa_calls) -> None:
    gen = torch.Generator().manual_seed(4)
    Q, K, V = (randn(gen, 2, 6, 4) for _ in range(3))
    nearly_causal = at.causal_mask(6)
    nearly_causal[5, 5] = False  # not the causal mask any more
    batched_causal = at.causal_mask(6).expand(2, 6, 6)  # not all leading axes are 1
    for mask in (nearly_causal, batched_causal, random_mask(gen, (2, 6, 6))):
        sdpa_calls.clear()
        out, weights = at.attention(Q, K, V, mask, need_weights=False)
        assert weights is None
        assert len(sdpa_calls) == 1 and not sdpa_calls[0].get("is_causal", False)
        assert sdpa_calls[0]["attn_mask"].dtype == torch.bool
        torch.testing.assert_close(out, at.attention(Q, K, V, mask)[0], rtol=0, atol=1e-10)


def test_need_weights_true_does_not_call_sdpa(sdpa_calls) -> None:
    gen = torch.Generator().manual_seed(5)
    Q, K, V = (randn(gen, 2, 6, 4) for _ in range(3))
    _, weights = at.attention(Q, K, V, at.causal_mask(6))
    assert sdpa_calls == []
    assert weights.shape == (2, 6, 6)


def nan_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """A reference SDPA that, like some fused kernels, returns NaN for fully masked rows."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        attn_mask = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("kernel", ["torch", "nan-producing"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_zeros_and_finite_gradients(
    kernel: str, need_weights: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel == "nan-producing":
        monkeypatch.setattr(F, "scaled_dot_product_attention", nan_sdpa)
    gen = torch.Generator().manual_seed(6)
    Q, K, V = randn(gen, 2, 3, 5, 4), randn(gen, 2, 3, 6, 4), randn(gen, 2, 3, 6, 3)
    for t in (Q, K, V):
        t.requires_grad_()
    mask = random_mask(gen, (2, 1, 5, 6))
    mask[0, :, 2] = False  # query 2 of batch 0 sees no key
    mask[1, :, 4] = False
    out, weights = at.attention(Q, K, V, mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, :, 2], torch.zeros_like(out[0, :, 2]))
    assert torch.equal(out[1, :, 4], torch.zeros_like(out[1, :, 4]))
    if need_weights:
        assert torch.equal(weights[0, :, 2], torch.zeros_like(weights[0, :, 2]))
    gQ, gK, gV = torch.autograd.grad(out, (Q, K, V), randn(gen, *out.shape))
    for g in (gQ, gK, gV):
        assert torch.isfinite(g).all()
    assert torch.equal(gQ[0, :, 2], torch.zeros_like(gQ[0, :, 2]))
    # the other rows still agree with the oracle
    keep = mask.any(-1, keepdim=True)
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask | ~keep)
    torch.testing.assert_close(out * keep, expected * keep, rtol=0, atol=1e-10)


@FAST
@given(c=cases(), need_weights=st.booleans(), data=st.data())
def test_property_fully_masked_rows_are_zero_with_finite_gradients(
    c: dict, need_weights: bool, data
) -> None:
    Q, K, V = c["Q"], c["K"], c["V"]
    B, h, m, n = Q.shape[0], Q.shape[1], Q.shape[2], K.shape[2]
    mask = c["mask"] if c["mask"] is not None else torch.ones(m, n, dtype=torch.bool)
    mask = mask.expand(B, h, m, n).clone()
    dead = torch.tensor(data.draw(st.lists(st.booleans(), min_size=m, max_size=m)))
    mask[:, :, dead] = False  # these queries see no key at all
    out, weights = at.attention(Q, K, V, mask, need_weights=need_weights)
    assert torch.equal(out[:, :, dead], torch.zeros_like(out[:, :, dead]))
    if need_weights:
        assert torch.equal(weights[:, :, dead], torch.zeros_like(weights[:, :, dead]))
    gQ, gK, gV = grads(out, c)
    assert all(torch.isfinite(g).all() for g in (gQ, gK, gV))
    assert torch.equal(gQ[:, :, dead], torch.zeros_like(gQ[:, :, dead]))


def test_no_keys_at_all_gives_zeros() -> None:
    Q, K, V = torch.ones(2, 3, 4, dtype=F64), torch.ones(2, 0, 4, dtype=F64), torch.ones(2, 0, 5)
    V = V.to(F64)
    for need_weights in (True, False):
        out, _ = at.attention(Q, K, V, need_weights=need_weights)
        assert out.shape == (2, 3, 5)
        assert torch.equal(out, torch.zeros_like(out))


# ---------------------------------------------------------------------------------- invariants


@FAST
@given(c=cases())
def test_rows_sum_to_one_and_masked_weights_are_zero(c: dict) -> None:
    _, weights = at.attention(c["Q"], c["K"], c["V"], c["mask"])
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(weights.shape[:-1], dtype=F64), rtol=0, atol=1e-12
    )
    assert (weights >= 0).all()
    if c["mask"] is not None:
        masked = ~c["mask"].expand(weights.shape)
        assert torch.equal(weights[masked], torch.zeros_like(weights[masked]))


@FAST
@given(seed=SEEDS, T=st.integers(2, 8), t=st.integers(0, 6), need_weights=st.booleans())
def test_future_keys_do_not_change_earlier_outputs(
    seed: int, T: int, t: int, need_weights: bool
) -> None:
    t = t % (T - 1)  # change keys/values after position t; queries 0..t must not move
    gen = torch.Generator().manual_seed(seed)
    Q, K, V = randn(gen, 2, T, 3), randn(gen, 2, T, 3), randn(gen, 2, T, 2)
    K2, V2 = K.clone(), V.clone()
    K2[:, t + 1 :] = randn(gen, 2, T - t - 1, 3) * 10
    V2[:, t + 1 :] = randn(gen, 2, T - t - 1, 2) * 10
    mask = at.causal_mask(T)
    before, _ = at.attention(Q, K, V, mask, need_weights=need_weights)
    after, _ = at.attention(Q, K2, V2, mask, need_weights=need_weights)
    torch.testing.assert_close(before[:, : t + 1], after[:, : t + 1], rtol=0, atol=1e-12)
    assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :])


# --------------------------------------------------------------------------- 16-bit precision

# 16-bit results are compared with float64 attention on the same (rounded) inputs.
TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 4e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False])
def test_16_bit_attention_close_to_float64(dtype: torch.dtype, need_weights: bool) -> None:
    gen = torch.Generator().manual_seed(7)
    Q, K, V = (randn(gen, 2, 3, 8, 16, dtype=torch.float32).to(dtype) for _ in range(3))
    mask = random_mask(gen, (2, 1, 8, 8))
    out, weights = at.attention(Q, K, V, mask, need_weights=need_weights)
    assert out.dtype == dtype
    expected = F.scaled_dot_product_attention(Q.to(F64), K.to(F64), V.to(F64), attn_mask=mask)
    torch.testing.assert_close(out.to(F64), expected, rtol=0, atol=TOLERANCE[dtype])
    if need_weights:
        assert weights.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False])
def test_16_bit_attention_finite_at_extreme_logits(dtype: torch.dtype, need_weights: bool) -> None:
    # d_k = 1: the scaled scores are exactly q * k = ±1e4
    Q = torch.tensor([[100.0], [-100.0]], dtype=dtype)
    K = torch.tensor([[100.0], [-100.0], [0.0]], dtype=dtype)
    V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=dtype)
    out, weights = at.attention(Q, K, V, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()
    # query 0 scores (1e4, -1e4, 0): all weight on key 0; query 1: (-1e4, 1e4, 0) on key 1
    torch.testing.assert_close(out.to(F64), V[:2].to(F64), rtol=0, atol=1e-3)
    if need_weights:
        assert torch.isfinite(weights).all()


# ---------------------------------------------------------------------------- device agnostic


@pytest.mark.parametrize("need_weights", [True, False])
def test_runs_on_the_meta_device(need_weights: bool) -> None:
    """No tensor is created on a hardcoded device: meta inputs give meta outputs."""
    Q, K, V = (torch.empty(2, 3, 5, 4, device="meta") for _ in range(3))
    mask = None if not need_weights else torch.ones(5, 5, dtype=torch.bool, device="meta")
    out, weights = at.attention(Q, K, V, mask, need_weights=need_weights)
    assert out.device.type == "meta" and out.shape == (2, 3, 5, 4)
    if need_weights:
        assert weights.device.type == "meta"


# ------------------------------------------------------------------------------------- errors


def qkv(q=(2, 5, 8), k=(2, 7, 8), v=(2, 7, 3), dtype=F64):
    return torch.zeros(q, dtype=dtype), torch.zeros(k, dtype=dtype), torch.zeros(v, dtype=dtype)


def test_error_d_k_mismatch_names_both_shapes() -> None:
    Q, K, V = qkv(k=(2, 7, 6), v=(2, 7, 3))
    msg = "Q (2, 5, 8) and K (2, 7, 6) disagree on d_k (8 vs 6)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.attention(Q, K, V)


def test_error_k_v_disagree_on_n() -> None:
    Q, K, V = qkv(v=(2, 6, 3))
    msg = "K (2, 7, 8) and V (2, 6, 3) disagree on the number of keys n (7 vs 6)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.attention(Q, K, V, need_weights=False)


def test_error_batch_axes_do_not_broadcast() -> None:
    Q, K, V = qkv(q=(3, 5, 8), k=(2, 7, 8), v=(2, 7, 3))
    msg = "Q (3, 5, 8) and K (2, 7, 8) have batch axes (3,) and (2,) that cannot broadcast"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.attention(Q, K, V)


def test_error_too_few_axes() -> None:
    Q, K, V = qkv(q=(8,))
    with pytest.raises(ValueError, match=re.escape("Q (8,) has 1 axes; expected at least 2")):
        at.attention(Q, K, V)


@pytest.mark.parametrize("shape", [(5, 6), (2, 5, 1, 7), (3, 1, 7)])
def test_error_mask_not_broadcastable(shape: tuple[int, ...]) -> None:
    Q, K, V = qkv()
    mask = torch.ones(shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"mask \(.*\) cannot broadcast to the scores \(2, 5, 7\)"):
        at.attention(Q, K, V, mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int64])
def test_error_non_boolean_mask_points_to_converters(dtype: torch.dtype) -> None:
    Q, K, V = qkv()
    mask = torch.zeros(5, 7, dtype=dtype)
    with pytest.raises(ValueError, match=re.escape(f"mask (5, 7) has dtype {dtype}")) as info:
        at.attention(Q, K, V, mask, need_weights=False)
    assert "from_additive_mask" in str(info.value)
    assert "from_key_padding_mask" in str(info.value)


def test_error_integer_queries() -> None:
    Q = torch.zeros(2, 5, 8, dtype=torch.int64)
    _, K, V = qkv()
    msg = "Q has dtype torch.int64; attention needs floating-point tensors"
    with pytest.raises(ValueError, match=re.escape(msg)):
        at.attention(Q, K, V)


@pytest.mark.parametrize("name", ["K", "V"])
def test_error_bool_or_int_keys_and_values(name: str) -> None:
    Q, K, V = qkv()
    bad = {"K": K, "V": V}[name].to(torch.bool)
    args = (Q, bad, V) if name == "K" else (Q, K, bad)
    with pytest.raises(ValueError, match=f"{name} has dtype torch.bool; attention needs floating"):
        at.attention(*args)


def test_error_mixed_dtypes() -> None:
    Q, K, V = qkv()
    with pytest.raises(ValueError, match="Q has dtype torch.float64 but K has dtype torch.float32"):
        at.attention(Q, K.float(), V)


def test_error_tensors_on_different_devices() -> None:
    Q, K, V = qkv()
    with pytest.raises(ValueError, match="Q is on cpu but V is on meta"):
        at.attention(Q, K, V.to("meta"))


def test_error_mask_on_another_device() -> None:
    Q, K, V = qkv()
    mask = torch.ones(5, 7, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match="Q is on cpu but mask is on meta"):
        at.attention(Q, K, V, mask)


def test_error_not_a_tensor() -> None:
    _, K, V = qkv()
    with pytest.raises(ValueError, match="Q must be a torch.Tensor, got builtins.list"):
        at.attention([[1.0] * 8] * 5, K, V)


def test_error_zero_width_keys() -> None:
    Q, K, V = qkv(q=(2, 5, 0), k=(2, 7, 0))
    with pytest.raises(ValueError, match=r"Q \(2, 5, 0\) has d_k = 0"):
        at.attention(Q, K, V)
