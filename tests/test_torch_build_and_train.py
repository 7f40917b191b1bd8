"""attnlib.torch, lesson 06: gradients by hand, CausalSelfAttention, decoding with a cache,
induction heads and the property test of attention.

PyTorch itself is the oracle: ``torch.autograd`` and ``gradcheck`` in float64 for the backward
functions, ``F.scaled_dot_product_attention(is_causal=True)`` and ``nn.MultiheadAttention`` with
its weights copied for ``CausalSelfAttention`` (outputs and gradients), and full causal
attention for every step of a cached decoding loop.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attnlib.numpy as an
import attnlib.torch as at

pytestmark = pytest.mark.lesson06

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)
FAST = settings(max_examples=25, deadline=None)
TOL = {"rtol": 1e-10, "atol": 1e-10}  # float64 against autograd in float64


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def random_mask(gen: torch.Generator, shape: tuple[int, ...], p: float = 0.6) -> torch.Tensor:
    """A random keep-mask; some rows may be fully masked."""
    return torch.rand(shape, generator=gen) < p


def leaves(*xs: torch.Tensor) -> list[torch.Tensor]:
    return [x.detach().clone().requires_grad_() for x in xs]


# ------------------------------------------------------------------------- softmax_backward


@FAST
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=SEEDS, data=st.data())
def test_softmax_backward_equals_autograd(shape: list[int], seed: int, data: st.DataObject):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    gen = torch.Generator().manual_seed(seed)
    x, g = randn(gen, *shape).requires_grad_(), randn(gen, *shape)
    y = torch.softmax(x, dim=axis)
    (expected,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(at.softmax_backward(y.detach(), g, axis=axis), expected, **TOL)


def test_softmax_backward_passes_gradcheck_and_is_zero_where_the_softmax_is() -> None:
    gen = torch.Generator().manual_seed(0)
    y = at.masked_softmax(randn(gen, 2, 3, 4), random_mask(gen, (2, 3, 4))).requires_grad_()
    g = randn(gen, 2, 3, 4).requires_grad_()
    assert torch.autograd.gradcheck(at.softmax_backward, (y, g))
    grad = at.softmax_backward(y.detach(), g.detach())
    assert (grad[y.detach() == 0] == 0).all()


# ----------------------------------------------------------------------- attention_backward


@st.composite
def attention_cases(draw: st.DrawFn) -> dict:
    gen = torch.Generator().manual_seed(draw(SEEDS))
    B, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, n = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    mask_shape = draw(st.sampled_from([None, (m, n), (B, 1, 1, n), (B, h, m, n), (h, m, n)]))
    return {
        "Q": randn(gen, B, h, m, d_k, dtype=F64) * 2,
        "K": randn(gen, B, h, n, d_k) * 2,
        "V": randn(gen, B, h, n, d_v),
        "grad": randn(gen, B, h, m, d_v),
        "mask": None if mask_shape is None else random_mask(gen, mask_shape),
    }


@FAST
@given(c=attention_cases())
def test_attention_backward_equals_autograd(c: dict) -> None:
    Q, K, V = leaves(c["Q"], c["K"], c["V"])
    out, _ = at.attention(Q, K, V, c["mask"])
    expected = torch.autograd.grad(out, (Q, K, V), c["grad"])
    got = at.attention_backward(c["Q"], c["K"], c["V"], c["grad"], c["mask"])
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


@FAST
@given(c=attention_cases())
def test_attention_backward_equals_sdpa_gradients_where_rows_have_a_key(c: dict) -> None:
    mask = c["mask"]
    if mask is not None:  # SDPA's own answer for an empty row varies by kernel and version
        mask = mask | ~mask.any(dim=-1, keepdim=True)
    Q, K, V = leaves(c["Q"], c["K"], c["V"])
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    expected = torch.autograd.grad(out, (Q, K, V), c["grad"])
    got = at.attention_backward(c["Q"], c["K"], c["V"], c["grad"], mask)
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_attention_backward_sums_over_broadcast_batch_axes() -> None:
    gen = torch.Generator().manual_seed(1)
    Q, K, V = randn(gen, 2, 1, 4, 3), randn(gen, 1, 3, 5, 3), randn(gen, 3, 5, 2)
    mask, g = random_mask(gen, (2, 1, 1, 5)), randn(gen, 2, 3, 4, 2)
    leaf = leaves(Q, K, V)
    expected = torch.autograd.grad(at.attention(*leaf, mask)[0], leaf, g)
    got = at.attention_backward(Q, K, V, g, mask)
    assert [tuple(x.shape) for x in got] == [(2, 1, 4, 3), (1, 3, 5, 3), (3, 5, 2)]
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_attention_backward_zero_for_fully_masked_rows_and_gradcheck() -> None:
    gen = torch.Generator().manual_seed(2)
    Q, K, V, g = randn(gen, 2, 4, 3), randn(gen, 2, 5, 3), randn(gen, 2, 5, 2), randn(gen, 2, 4, 2)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False  # a query with no allowed key
    dQ, dK, dV = at.attention_backward(Q, K, V, g, mask)
    assert (dQ[0, 1] == 0).all()
    assert all(torch.isfinite(x).all() for x in (dQ, dK, dV))
    # the hand-written backward is differentiable again: second derivatives are right
    args = leaves(Q, K, V, g)
    assert torch.autograd.gradcheck(lambda *a: at.attention_backward(*a, mask), args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_attention_backward_keeps_the_dtype(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    args = [randn(gen, 2, 3, 4), randn(gen, 2, 5, 4), randn(gen, 2, 5, 3), randn(gen, 2, 3, 3)]
    exact = at.attention_backward(*args, at.causal_mask(5)[:3])
    low = at.attention_backward(*(a.to(dtype) for a in args), at.causal_mask(5)[:3])
    tol = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    for a, b in zip(low, exact, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol)


def test_backward_functions_and_induction_score_on_the_meta_device() -> None:
    def t(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, device="meta")

    mask = torch.ones(5, 6, dtype=torch.bool, device="meta")
    results = [
        at.softmax_backward(t(2, 5, 6), t(2, 5, 6), axis=1),
        *at.attention_backward(t(2, 1, 5, 4), t(3, 6, 4), t(3, 6, 2), t(2, 3, 5, 2), mask),
        at.induction_score(t(2, 3, 6, 6), 2),
    ]
    assert all(r.device.type == "meta" for r in results)
    assert [tuple(r.shape) for r in results[1:]] == [(2, 1, 5, 4), (3, 6, 4), (3, 6, 2), (2, 3)]


# ---------------------------------------------------------------------- CausalSelfAttention


def nanogpt_reference(module: at.CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The layer written out with the functional API and SDPA's own causal mask."""
    B, T, d = x.shape
    h = module.n_heads
    q, k, v = F.linear(x, module.qkv.weight, module.qkv.bias).split(d, dim=-1)
    q, k, v = (t.view(B, T, h, d // h).transpose(1, 2) for t in (q, k, v))  # (B, h, T, d_head)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_head)
    y = y.transpose(1, 2).reshape(B, T, d)  # (B, T, d)
    return F.linear(y, module.proj.weight, module.proj.bias)


def grads_of(out: torch.Tensor, g: torch.Tensor, inputs: list[torch.Tensor]) -> tuple:
    return torch.autograd.grad(out, inputs, g)


@FAST
@given(
    seed=SEEDS,
    B=st.integers(1, 3),
    T=st.integers(1, 7),
    h=st.integers(1, 4),
    d_head=st.integers(1, 4),
    bias=st.booleans(),
)
def test_causal_self_attention_equals_sdpa_is_causal(seed, B, T, h, d_head, bias) -> None:
    torch.manual_seed(seed)
    module = at.CausalSelfAttention(h * d_head, h, bias=bias, dtype=F64).eval()
    gen = torch.Generator().manual_seed(seed)
    x, g = randn(gen, B, T, h * d_head).requires_grad_(), randn(gen, B, T, h * d_head)
    out = module(x)
    expected = nanogpt_reference(module, x)
    assert out.shape == (B, T, h * d_head) and out.dtype == F64
    torch.testing.assert_close(out, expected, **TOL)
    params = [x, *module.parameters()]
    for mine, theirs in zip(grads_of(out, g, params), grads_of(expected, g, params), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


@pytest.mark.parametrize("mask_kind", ["boolean", "additive"])
@pytest.mark.parametrize("bias", [True, False])
def test_causal_self_attention_equals_nn_multihead_attention(mask_kind: str, bias: bool) -> None:
    B, T, d, h = 2, 6, 12, 3
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=F64)
    if bias:  # non-zero biases, so that a misplaced one shows
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    module = at.CausalSelfAttention.from_torch(mha)
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)  # nn.MultiheadAttention: True = blocked
    if mask_kind == "boolean":
        attn_mask = blocked
    else:
        attn_mask = torch.zeros(T, T, dtype=F64).masked_fill(blocked, float("-inf"))
    gen = torch.Generator().manual_seed(1)
    x, g = randn(gen, B, T, d), randn(gen, B, T, d)
    x_ours, x_theirs = leaves(x, x)
    ours = module(x_ours)
    theirs, _ = mha(x_theirs, x_theirs, x_theirs, attn_mask=attn_mask, need_weights=False)
    torch.testing.assert_close(ours, theirs, **TOL)
    (ours.mul(g)).sum().backward()
    (theirs.mul(g)).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, **TOL)
    torch.testing.assert_close(module.qkv.weight.grad, mha.in_proj_weight.grad, **TOL)
    torch.testing.assert_close(module.proj.weight.grad, mha.out_proj.weight.grad, **TOL)
    if bias:
        torch.testing.assert_close(module.qkv.bias.grad, mha.in_proj_bias.grad, **TOL)
        torch.testing.assert_close(module.proj.bias.grad, mha.out_proj.bias.grad, **TOL)


def test_head_layout_is_the_lessons_multi_head_attention() -> None:
    """``W_q = qkv.weight[:d].T`` etc.: the right-multiplied weights of lesson 04."""
    d, h, T = 8, 2, 5
    torch.manual_seed(2)
    module = at.CausalSelfAttention(d, h, bias=False, dtype=F64).eval()
    W = module.qkv.weight.detach()  # (3d, d), nn.Linear's (out, in)
    x = randn(torch.Generator().manual_seed(3), 3, T, d)
    expected, _ = at.multi_head_attention(
        x, x, W[:d].T, W[d : 2 * d].T, W[2 * d :].T, module.proj.weight.detach().T, h,
        at.causal_mask(T),
    )  # fmt: skip
    torch.testing.assert_close(module(x).detach(), expected, **TOL)
    # head i owns columns i*d_head:(i+1)*d_head of q, k and v
    weights = module.attention_weights(x).detach()  # (B, h, T, T)
    for i in range(h):
        cols = slice(i * (d // h), (i + 1) * (d // h))
        q, k = x @ W[:d].T[:, cols], x @ W[d : 2 * d].T[:, cols]
        _, head = at.attention(q, k, k, at.causal_mask(T))
        torch.testing.assert_close(weights[:, i], head, **TOL)


def test_causal_self_attention_passes_gradcheck() -> None:
    torch.manual_seed(4)
    module = at.CausalSelfAttention(6, 2, dtype=F64).eval()
    x = randn(torch.Generator().manual_seed(5), 2, 4, 6).requires_grad_()
    names = [name for name, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in module.parameters()]

    def run(x: torch.Tensor, *values: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(names, values, strict=True)), (x,))

    assert torch.autograd.gradcheck(run, (x, *params))


def test_the_future_does_not_reach_the_past() -> None:
    torch.manual_seed(6)
    module = at.CausalSelfAttention(8, 4, dtype=F64).eval()
    gen = torch.Generator().manual_seed(7)
    x = randn(gen, 2, 7, 8)
    changed = x.clone()
    changed[:, 4:] = randn(gen, 2, 3, 8)
    with torch.no_grad():
        torch.testing.assert_close(module(changed)[:, :4], module(x)[:, :4], **TOL)
        assert not torch.allclose(module(changed)[:, 4:], module(x)[:, 4:])


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


def test_dropout_acts_in_training_only(sdpa_calls: list[dict]) -> None:
    torch.manual_seed(8)
    module = at.CausalSelfAttention(8, 2, dropout=0.5, dtype=F64)
    plain = at.CausalSelfAttention(8, 2, dtype=F64)
    plain.load_state_dict(module.state_dict())
    x = randn(torch.Generator().manual_seed(9), 2, 6, 8)
    with torch.no_grad():
        module.train()
        first, second = module(x), module(x)
        assert sdpa_calls == []  # explicit weights, so nn.Dropout can act on them
        assert not torch.allclose(first, second)
        module.eval()
        torch.testing.assert_close(module(x), plain.eval()(x), **TOL)
        assert [c.get("is_causal") for c in sdpa_calls] == [True, True]
        assert all(c.get("attn_mask") is None for c in sdpa_calls)
        plain.train()  # p = 0: the fast path in training too
        torch.testing.assert_close(plain(x), module(x), **TOL)
        assert len(sdpa_calls) == 4


def test_dropout_is_on_the_attention_weights() -> None:
    torch.manual_seed(10)
    module = at.CausalSelfAttention(4, 2, dropout=0.3, dtype=F64).train()
    seen = []
    module.attn_dropout.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    with torch.no_grad():
        module(torch.randn(2, 3, 4, dtype=F64))
    (weights,) = seen  # what nn.Dropout acted on: the causal weights (B, h, T, T)
    assert weights.shape == (2, 2, 3, 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3, dtype=F64), **TOL)
    assert (weights.triu(1) == 0).all()
    # every weight dropped: the heads give zeros and only the output projection's bias is left
    module = at.CausalSelfAttention(4, 2, dropout=1.0, dtype=F64).train()
    with torch.no_grad():
        module.proj.bias.normal_()
        out = module(torch.randn(2, 3, 4, dtype=F64))
    torch.testing.assert_close(out, module.proj.bias.detach().expand(2, 3, 4), **TOL)
    # with p = 0.5 the kept weights are doubled: averaged over many draws (one batch entry
    # each) the output is the eval output
    module = at.CausalSelfAttention(4, 1, dropout=0.5, dtype=F64)
    x = torch.randn(1, 3, 4, dtype=F64)
    with torch.no_grad():
        mean = module.train()(x.expand(20000, 3, 4)).mean(0)
        torch.testing.assert_close(mean, module.eval()(x)[0], rtol=0, atol=0.05)


def test_attention_weights_are_causal_distributions() -> None:
    torch.manual_seed(11)
    module = at.CausalSelfAttention(6, 3, dropout=0.9, dtype=F64).train()
    x = torch.randn(2, 5, 6, dtype=F64)
    w = module.attention_weights(x)
    assert w.shape == (2, 3, 5, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5, dtype=F64), **TOL)
    assert (w.triu(1) == 0).all()


def test_causal_self_attention_on_the_meta_device_and_in_float32() -> None:
    meta = at.CausalSelfAttention(8, 2, device="meta")
    out = meta(torch.empty(2, 5, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 8)
    module = at.CausalSelfAttention(8, 2)
    assert module(torch.randn(2, 5, 8)).dtype == torch.float32
    assert "d_model=8, n_heads=2, d_head=4, dropout=0.0" in repr(module)


class LearnerAttention(nn.Module):
    """A learner's CausalSelfAttention as the lesson asks for it, with one classic slip at a
    time (``slip``; none: right)."""

    slip = ""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.n_heads, self.dropout = n_heads, nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        h, hd = self.n_heads, d // self.n_heads
        qkv = self.qkv(x)  # (B, T, 3d)
        if self.slip == "per-head split":  # each head's q, k, v side by side
            q, k, v = qkv.view(B, T, h, 3 * hd).transpose(1, 2).split(hd, dim=-1)
        else:
            q, k, v = qkv.split(d, dim=-1)  # (B, T, d) each
            if self.slip == "q and k swapped":
                q, k = k, q
            q, k, v = (z.view(B, T, h, hd).transpose(1, 2) for z in (q, k, v))  # (B, h, T, hd)
        divisor = {"unscaled": 1.0, "by d_head": hd, "by sqrt(d_model)": math.sqrt(d)}
        s = q @ k.transpose(-2, -1) / divisor.get(self.slip, math.sqrt(hd))  # (B, h, T, T)
        if self.slip != "no mask":
            keep = torch.ones(T, T, dtype=torch.bool, device=x.device)
            keep = keep.tril(1 if self.slip == "sees the next" else 0)
            s = s.masked_fill(~keep, float("-inf"))
        w = self.dropout(torch.softmax(s, dim=-2 if self.slip == "over queries" else -1))
        y = w @ v  # (B, h, T, hd)
        if self.slip == "merged by reshape":
            y = y.reshape(B, T, d)
        else:
            y = y.transpose(1, 2).reshape(B, T, d)
        return self.proj(y)


CAUSAL_SLIPS = {
    "": "correct",
    "no mask": "there is no causal mask",
    "sees the next": "see the next one",
    "unscaled": "scores are not scaled",
    "by d_head": "scaled by d_head instead of sqrt(d_head)",
    "by sqrt(d_model)": "scaled by sqrt(d_model) instead of sqrt(d_head)",
    "over queries": "runs over the queries",
    "merged by reshape": "merged by reshape without transposing",
    "q and k swapped": "q and k are swapped",
    "per-head split": "split per head",
}


def assert_verdict(name: str, learner: type, words: str) -> None:
    """The checks pass ``learner`` if ``words`` is "correct", else fail it with ``words``."""
    from attnlib import checks

    outcome = checks.check(name, learner)
    assert outcome.passed == (words == "correct"), outcome.feedback()
    assert words in outcome.feedback()


@pytest.mark.parametrize("slip", list(CAUSAL_SLIPS))
def test_each_classic_slip_in_a_learners_module_is_named(slip: str) -> None:
    learner = type("CausalSelfAttention", (LearnerAttention,), {"slip": slip})
    assert_verdict("CausalSelfAttention", learner, CAUSAL_SLIPS[slip])


def test_a_module_whose_constructor_lost_a_parameter_is_told_how_the_checks_build_it():
    class NoDropout(at.CausalSelfAttention):
        def __init__(self, d_model, n_heads):  # the contract's dropout=0.0 left out
            super().__init__(d_model, n_heads)

    assert_verdict("CausalSelfAttention", NoDropout, "takes 3 positional arguments but 4")
    words = "the checks build CausalSelfAttention(d_model, n_heads, dropout), dropout also left"
    assert_verdict("CausalSelfAttention", NoDropout, words)


def lessons_buggy_block() -> type:
    """The lesson's own BuggyBlock, from its source notebook: the block a learner repairs."""
    import json

    from course import REPO

    path = REPO / "solutions" / "06-build-and-train" / "06-build-and-train.ipynb"
    cells = json.loads(path.read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if "class BuggyBlock" in "".join(c["source"])]
    names = {"math": math, "torch": torch, "nn": nn}
    exec(source[: source.index("\ntorch.manual_seed")], names)
    return names["BuggyBlock"]


BLOCK_SLIPS = {  # a bug of BuggyBlock left in a learner's RepairedBlock: the verdict's words
    "": "correct",
    "scale": "still divided by d_head",
    "mask": "see the next one",
    "no mask": "there is no causal mask",
    "axis": "still runs over the queries",
    "merge": "still merged by reshape alone",
}


def repaired_block(left: str = "") -> type:
    """A learner's RepairedBlock: the lesson's BuggyBlock with its attention repaired, but for
    the bug ``left`` (its class attribute; none: right)."""

    class RepairedBlock(lessons_buggy_block()):
        def attention(self, z):
            B, T, C = z.shape
            bug = self.left
            q, k, v = self.attn.qkv(z).split(C, dim=-1)  # (B, T, C) each
            q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
            divisor = self.d_head if bug == "scale" else math.sqrt(self.d_head)
            scores = q @ k.transpose(-2, -1) / divisor  # (B, h, T, T)
            if bug != "no mask":
                allowed = torch.ones(T, T, dtype=torch.bool).tril(1 if bug == "mask" else 0)
                scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-2 if bug == "axis" else -1)
            y = weights @ v  # (B, h, T, d_head)
            y = y.reshape(B, T, C) if bug == "merge" else y.transpose(1, 2).reshape(B, T, C)
            return self.attn.proj(y), weights

    RepairedBlock.left = left
    return RepairedBlock


@pytest.mark.parametrize("left", list(BLOCK_SLIPS))
def test_each_bug_left_in_a_repaired_block_is_named(left: str) -> None:
    assert_verdict("RepairedBlock", repaired_block(left), BLOCK_SLIPS[left])


MODULE_EXERCISES = {  # exercise: (a learner's module with one mistake or none, the mistake's name)
    "CausalSelfAttention": (
        lambda slip: type("CausalSelfAttention", (LearnerAttention,), {"slip": slip}),
        CAUSAL_SLIPS,
        "slip",
    ),
    "RepairedBlock": (repaired_block, BLOCK_SLIPS, "left"),
}


@pytest.mark.parametrize("name", list(MODULE_EXERCISES))
def test_secret_problems_change_no_verdict_of_a_learners_module(name: str) -> None:
    """A grading with secret problems builds modules of its own sizes, dtypes and weights
    (``Exercise.drawn``): a right module passes every one of them, and a module with a named
    mistake is judged word for word as without them."""
    from attnlib import checks

    make, slips, _ = MODULE_EXERCISES[name]
    for slip in slips:
        public = checks.judge(name, make(slip))
        assert public.passed == (slip == ""), public
        for seed in (11, 22):
            assert checks.judge(name, make(slip), secret=checks.Secret(seed)) == public, slip
    right = make("")
    for seed in range(5):  # 50 modules of a grading's own
        assert checks.judge(name, right, secret=checks.Secret(seed, count=10)), seed


@pytest.mark.parametrize("name", list(MODULE_EXERCISES))
def test_a_module_right_only_on_the_public_problems_fails_on_secret_ones(name: str) -> None:
    """The attack on the module exercises, which have no search: a module that records the
    inputs the checks build it with (a spy), then is right on exactly those and drops the causal
    mask on any other. The public checks pass it; a grading's own modules catch it."""
    from attnlib import checks
    from attnlib.checks._core import SECRET_NOTE

    make, _, attribute = MODULE_EXERCISES[name]
    seen: set[bytes] = set()

    def digest(x: torch.Tensor) -> bytes:
        return repr((x.shape, x.dtype)).encode() + x.detach().numpy().tobytes()

    class Spy(make("")):
        def forward(self, x):
            seen.add(digest(x))
            return super().forward(x)

    class PublicOnly(make("")):
        def forward(self, x):
            setattr(self, attribute, "" if digest(x) in seen else "no mask")
            return super().forward(x)

    assert checks.judge(name, Spy) and seen
    assert checks.judge(name, PublicOnly)  # right on every public problem
    verdicts = [checks.judge(name, PublicOnly, secret=checks.Secret(seed)) for seed in (1, 2)]
    for verdict in verdicts:
        assert not verdict and verdict.message.endswith(SECRET_NOTE), verdict
        assert "no causal mask" in verdict.message, verdict
    assert checks.judge(name, PublicOnly, secret=checks.Secret(1)) == verdicts[0]


@pytest.mark.parametrize("name", list(MODULE_EXERCISES))
def test_a_module_mistake_is_one_mistake_in_the_report_whatever_problem_shows_it(name: str):
    """The same slip shown on two problems (here: the first public one, and the second for a
    module right on the first) says where, as every check does, and has one key and a label
    that names the mistake alone in the class report (autograder.history)."""
    from attnlib import checks
    from autograder import history

    make, _, attribute = MODULE_EXERCISES[name]
    first = (2, 5, 12)  # the first public problem's x

    class RightOnTheFirst(make("")):
        def forward(self, x):
            setattr(self, attribute, "" if tuple(x.shape) == first else "no mask")
            return super().forward(x)

    said = [checks.judge(name, module).message for module in (make("no mask"), RightOnTheFirst)]
    assert said[0] != said[1] and all(" on x (" in s and "n_heads=" in s for s in said), said
    assert history.mistake_key(said[0]) == history.mistake_key(said[1]), said
    label = history.mistake_label(said)
    assert label == said[0].split(" on x (")[0] and "no causal mask" in label, label


# ------------------------------------------------------------------------- cached_attention


@FAST
@given(
    seed=SEEDS,
    B=st.integers(1, 3),
    h=st.integers(1, 3),
    T=st.integers(1, 8),
    d=st.integers(1, 5),
)
def test_every_cached_step_equals_full_causal_attention(seed, B, h, T, d) -> None:
    gen = torch.Generator().manual_seed(seed)
    Q, K, V = randn(gen, B, h, T, d), randn(gen, B, h, T, d), randn(gen, B, h, T, d)
    cache = None
    for t in range(T):
        out_t, cache = at.cached_attention(
            Q[:, :, t : t + 1], K[:, :, t : t + 1], V[:, :, t : t + 1], cache
        )
        n = t + 1
        full = F.scaled_dot_product_attention(Q[:, :, :n], K[:, :, :n], V[:, :, :n], is_causal=True)
        torch.testing.assert_close(out_t, full[:, :, -1:], **TOL)
        ours, _ = at.attention(Q[:, :, :n], K[:, :, :n], V[:, :, :n], at.causal_mask(n))
        torch.testing.assert_close(out_t, ours[:, :, -1:], **TOL)
    torch.testing.assert_close(cache[0], K, rtol=0, atol=0)
    torch.testing.assert_close(cache[1], V, rtol=0, atol=0)


def test_a_cached_decoding_loop_passes_gradcheck() -> None:
    gen = torch.Generator().manual_seed(12)
    Q, K, V = (randn(gen, 1, 2, 3, 2).requires_grad_() for _ in range(3))

    def decode(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        cache, outs = None, []
        for t in range(Q.shape[-2]):
            out_t, cache = at.cached_attention(
                Q[..., t : t + 1, :], K[..., t : t + 1, :], V[..., t : t + 1, :], cache
            )
            outs.append(out_t)
        return torch.cat(outs, dim=-2)  # (B, h, T, d)

    assert torch.autograd.gradcheck(decode, (Q, K, V))
    torch.testing.assert_close(
        decode(Q, K, V), F.scaled_dot_product_attention(Q, K, V, is_causal=True), **TOL
    )


def test_cached_attention_runs_on_any_device_and_keeps_the_dtype() -> None:
    def step(device: str, dtype: torch.dtype, t: int) -> tuple:
        q, k, v = (torch.zeros(2, 3, 1, 4, device=device, dtype=dtype) for _ in range(3))
        cache = tuple(torch.zeros(2, 3, t, 4, device=device, dtype=dtype) for _ in range(2))
        return at.cached_attention(q, k, v, cache)

    out, (K, V) = step("meta", torch.float32, 5)
    assert out.device.type == K.device.type == V.device.type == "meta"
    assert K.shape == (2, 3, 6, 4)
    for dtype in (torch.float32, torch.float16):
        out, (K, _) = step("cpu", dtype, 2)
        assert out.dtype == K.dtype == dtype


def test_cached_attention_agrees_with_numpy() -> None:
    gen = torch.Generator().manual_seed(13)
    q, k, v = (randn(gen, 2, 3, 1, 4) for _ in range(3))
    cache = (randn(gen, 2, 3, 5, 4), randn(gen, 2, 3, 5, 4))
    out, (K, V) = at.cached_attention(q, k, v, cache)
    out_np, (K_np, V_np) = an.cached_attention(
        q.numpy(), k.numpy(), v.numpy(), tuple(c.numpy() for c in cache)
    )
    np.testing.assert_allclose(out.numpy(), out_np, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(K.numpy(), K_np)
    np.testing.assert_array_equal(V.numpy(), V_np)


# -------------------------------------------------------------------------- induction_score


def head(T: int, period: int, kind: str) -> torch.Tensor:
    """Hand-made causal weights ``(T, T)`` of one head of a given kind."""
    w = torch.zeros(T, T, dtype=F64)
    for i in range(T):
        if kind == "induction" and i >= period:
            w[i, i - period + 1] = 1.0
        elif kind == "previous" and i >= 1:
            w[i, i - 1] = 1.0
        elif kind == "uniform":
            w[i, : i + 1] = 1.0 / (i + 1)
        else:
            w[i, i] = 1.0
    return w


def test_induction_score_tells_the_kinds_of_head_apart() -> None:
    T, period = 20, 7
    weights = torch.stack([head(T, period, k) for k in ("induction", "uniform", "previous")])
    scores = at.induction_score(weights.expand(2, 3, T, T), period)  # (B, h, T, T) -> (B, h)
    assert scores.shape == (2, 3) and scores.dtype == F64
    assert scores[0, 0] == pytest.approx(1.0)
    assert scores[0, 1] == pytest.approx(sum(1 / (i + 1) for i in range(period, T)) / (T - period))
    assert 1 / T < scores[0, 1] < 2 / period
    assert scores[0, 2] == pytest.approx(0.0)
    torch.testing.assert_close(scores[0], scores[1])


def test_induction_score_is_differentiable_and_agrees_with_numpy() -> None:
    T, period = 9, 4
    logits = randn(torch.Generator().manual_seed(14), 2, 3, T, T).requires_grad_()
    weights = at.masked_softmax(logits, at.causal_mask(T))
    scores = at.induction_score(weights, period)
    np.testing.assert_allclose(
        scores.detach().numpy(), an.induction_score(weights.detach().numpy(), period), rtol=1e-12
    )
    (grad,) = torch.autograd.grad(scores.sum(), weights)
    expected = torch.zeros(T, T, dtype=F64)
    for i in range(period, T):
        expected[i, i - period + 1] = 1 / (T - period)
    torch.testing.assert_close(grad, expected.expand(2, 3, T, T), **TOL)
    w = weights.detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda w: at.induction_score(w, period), (w,))


# ------------------------------------------------------------------------- check_attention


def scores_of(Q: torch.Tensor, K: torch.Tensor, divisor=math.sqrt) -> torch.Tensor:
    return Q @ K.transpose(-2, -1) / divisor(Q.shape[-1])  # (..., m, n)


def allowed(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return torch.ones_like(like, dtype=torch.bool)
    return mask.expand(like.shape)


def sdpa_based(Q, K, V, mask=None):
    """SDPA for the output (empty rows set to zero by hand), explicit weights beside it."""
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    weights = at.masked_softmax(at.scaled_dot_scores(Q, K), mask)
    if mask is not None:
        out = torch.where(mask.any(dim=-1, keepdim=True), out, torch.zeros_like(out))
    return out, weights


def float32_attention(Q, K, V, mask=None):
    return at.attention(Q.float(), K.float(), V.float(), mask)


def minus_1e9_fixed(Q, K, V, mask=None):
    s = scores_of(Q, K)
    keep = allowed(mask, s)
    w = torch.softmax(s.masked_fill(~keep, -1e9), dim=-1) * keep.any(dim=-1, keepdim=True)
    return w @ V, w


def additive_mask_and_einsum(Q, K, V, mask=None):
    s = scores_of(Q, K)
    if mask is not None:
        s = s + at.to_additive_mask(mask, dtype=s.dtype)
    w = at.softmax(s)  # a row of -inf gives zeros
    return torch.einsum("...mn,...nd->...md", w, V), w


def keeps_the_graph(Q, K, V, mask=None):
    Q = Q.clone().requires_grad_()
    return at.attention(Q, K, V, mask)


CORRECT = {
    "reference": at.attention,
    "SDPA-based": sdpa_based,
    "float32": float32_attention,
    "-1e9 with empty rows fixed": minus_1e9_fixed,
    "additive -inf mask, einsum": additive_mask_and_einsum,
    "returns tensors that require grad": keeps_the_graph,
}


def test_check_attention_names_missing_weights() -> None:
    def output_only(Q, K, V, mask=None):
        return at.attention(Q, K, V, mask, need_weights=False)  # (output, None)

    with pytest.raises(AssertionError, match=r"^returns \(output, weights\): the weights .* None"):
        at.check_attention(output_only)


@pytest.mark.parametrize("name", list(CORRECT))
def test_check_attention_accepts_correct_attention(name: str) -> None:
    assert at.check_attention(CORRECT[name]) is None


def test_check_attention_on_a_chosen_device_and_dtype() -> None:
    seen = []

    def spy(Q, K, V, mask=None):
        seen.append((Q.device.type, Q.dtype))
        return at.attention(Q, K, V, mask)

    at.check_attention(spy, device="cpu", dtype=torch.float32)
    assert set(seen) == {("cpu", torch.float32)}


def from_weights(weights_of):
    def attention(Q, K, V, mask=None):
        w = weights_of(Q, K, mask)
        return w @ V, w

    return attention


def naive(s: torch.Tensor, keep: torch.Tensor, fill: float = float("-inf")) -> torch.Tensor:
    return torch.softmax(s.masked_fill(~keep, fill), dim=-1)  # NaN for a row of -inf


def over_queries(Q, K, mask):
    s = scores_of(Q, K)
    return torch.nan_to_num(torch.softmax(s.masked_fill(~allowed(mask, s), -math.inf), dim=-2))


def output_ignores_mask(Q, K, V, mask=None):
    return torch.softmax(scores_of(Q, K), -1) @ V, at.attention(Q, K, V, mask)[1]


def k_transposed_wrongly(Q, K, V, mask=None):
    w = at.masked_softmax(Q @ K.transpose(0, 1) / math.sqrt(Q.shape[-1]), mask)
    return w @ V, w


BUGS = {
    "softmax over queries": (from_weights(over_queries), "sum to one over queries"),
    "mask ignored": (
        from_weights(lambda Q, K, m: torch.softmax(scores_of(Q, K), -1)),
        "masked keys get zero weight: .*ignored",
    ),
    "mask inverted": (
        from_weights(lambda Q, K, m: at.masked_softmax(scores_of(Q, K), None if m is None else ~m)),
        "masked keys get zero weight: .*inverted",
    ),
    "mask after softmax": (
        from_weights(
            lambda Q, K, m: torch.softmax(scores_of(Q, K), -1) * (True if m is None else m)
        ),
        "rows of the weights sum to one over keys: with a mask",
    ),
    "scaled by d_k": (
        from_weights(lambda Q, K, m: at.masked_softmax(scores_of(Q, K, lambda d: d), m)),
        r"scaled by sqrt\(d_k\): .*divided by d_k instead",
    ),
    "unscaled": (
        from_weights(lambda Q, K, m: at.masked_softmax(scores_of(Q, K, lambda d: 1), m)),
        r"scaled by sqrt\(d_k\): the scores are not scaled",
    ),
    "output from scores": (
        lambda Q, K, V, mask=None: (scores_of(Q, K) @ V, at.attention(Q, K, V, mask)[1]),
        "output = weights @ V",
    ),
    "output ignores the mask": (output_ignores_mask, "no future leakage under a causal mask"),
    "position bias": (
        from_weights(
            lambda Q, K, m: at.masked_softmax(
                scores_of(Q, K) + torch.arange(K.shape[-2], dtype=Q.dtype), m
            )
        ),
        "permutation equivariance",
    ),
    "NaN for fully masked rows": (
        from_weights(lambda Q, K, m: naive(scores_of(Q, K), allowed(m, scores_of(Q, K)))),
        "fully masked rows give zeros, not NaN: .*NaN",
    ),
    "-1e9 gives uniform rows": (
        from_weights(lambda Q, K, m: naive(scores_of(Q, K), allowed(m, scores_of(Q, K)), -1e9)),
        "fully masked rows give zeros, not NaN: .*uniform",
    ),
    "K.transpose(0, 1)": (k_transposed_wrongly, "batch dimensions broadcast independently"),
}


@pytest.mark.parametrize("name", list(BUGS))
def test_check_attention_names_the_broken_property(name: str) -> None:
    bug, message = BUGS[name]
    with pytest.raises(AssertionError, match=message):
        at.check_attention(bug)


def test_check_attention_on_tensors_earns_the_lessons_mark() -> None:
    """The lesson's check hands the candidates tensors back when the test passes tensors."""
    from attnlib import checks

    outcome = checks.check("check_attention", at.check_attention)
    assert outcome.passed, outcome.message


def counts_its_calls():
    """A check_attention that tests nothing: it accepts as many calls as there are right
    attentions, which the checks hand it first, and rejects every later one."""
    from attnlib.checks.candidates import CORRECT as RIGHT

    calls = []

    def check_attention(attention_fn, **kwargs):
        calls.append(1)
        if len(calls) > len(RIGHT):
            raise AssertionError("attention must be equivariant to permutations of the keys")

    return check_attention


@pytest.mark.xfail(strict=True, reason="known hole by default: the attentions' order is public")
def test_a_test_that_counts_its_calls_earns_nothing_by_default() -> None:
    from attnlib import checks

    assert not checks.judge("check_attention", counts_its_calls()).passed


def test_a_test_that_counts_its_calls_fails_in_a_gradings_own_order() -> None:
    """With secret problems, a grading runs the learner's test on the right and the broken
    attentions in an order of its own: the counting test rejects a right one there."""
    from attnlib import checks
    from attnlib.checks._core import SECRET_NOTE

    for seed in (1, 2, 3):
        outcome = checks.judge("check_attention", counts_its_calls(), secret=checks.Secret(seed))
        assert not outcome.passed and outcome.message.endswith(SECRET_NOTE), outcome.message
        assert "rejects a correct attention" in outcome.message, outcome.message


def one_property_only(attention_fn, **kwargs):
    """A real but weak property test: the rows of the weights sum to one, nothing else."""
    q = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    try:
        _, weights = attention_fn(q, q, q)
    except Exception as error:  # noqa: BLE001 — what a property test says of a broken one
        raise AssertionError(f"rows of the weights sum to one: it raised {error}") from None
    assert torch.allclose(weights.sum(-1), torch.ones(2, 5, dtype=q.dtype)), "rows sum to one"


def test_a_test_that_looks_at_its_attention_is_judged_the_same_in_any_order() -> None:
    """The course's own test passes in every order a grading draws. A weak one, which catches
    a few bugs, catches the same ones in every order, and is told so in the same words."""
    from attnlib import checks
    from attnlib.checks import lesson06

    assert checks.judge("check_attention", at.check_attention).passed
    for seed in range(4):
        assert checks.judge("check_attention", at.check_attention, secret=checks.Secret(seed))
    public = lesson06._property_test(one_property_only, None)
    assert public and public.startswith("check_attention catches "), public
    for seed in range(4):
        assert lesson06._property_drawn(one_property_only, (seed,)) == public, seed


def test_check_attention_leaves_torch_random_state_alone() -> None:
    torch.manual_seed(15)
    state = torch.get_rng_state()
    at.check_attention(at.attention)
    assert torch.equal(torch.get_rng_state(), state)


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: at.softmax_backward(torch.zeros(2, 5), torch.zeros(2, 4)),
            "y (2, 5) and grad_y (2, 4) must have the same shape",
        ),
        (
            lambda: at.softmax_backward(torch.zeros(2, 5), torch.zeros(2, 5, dtype=F64)),
            "y has dtype torch.float32 but grad_y has dtype torch.float64",
        ),
        (
            lambda: at.attention_backward(
                torch.zeros(2, 5, 8), torch.zeros(2, 7, 8), torch.zeros(2, 7, 3),
                torch.zeros(2, 5, 4),
            ),
            "grad_out (2, 5, 4) must have the shape of the output (2, 5, 3)",
        ),
        (
            lambda: at.attention_backward(
                torch.zeros(5, 8), torch.zeros(7, 8), torch.zeros(7, 3), torch.zeros(5, 3),
                torch.zeros(5, 7),
            ),
            "mask (5, 7) has dtype torch.float32",
        ),
        (
            lambda: at.CausalSelfAttention(10, 3),
            "d_model has 10 features, which 3 heads cannot split evenly (10 % 3 = 1)",
        ),
        (lambda: at.CausalSelfAttention(8, 0), "n_heads must be a positive int, got 0"),
        (
            lambda: at.CausalSelfAttention(8, 2, dropout=1.5),
            "dropout must be a probability in [0, 1], got 1.5",
        ),
        (
            lambda: at.CausalSelfAttention(8, 2)(torch.zeros(2, 5, 6)),
            "x (2, 5, 6) has 6 features but the module has d_model = 8",
        ),
        (
            lambda: at.CausalSelfAttention(8, 2)(torch.zeros(5, 8)),
            "x (5, 8) has 2 axes; expected 3: (B, T, d_model)",
        ),
        (
            lambda: at.CausalSelfAttention(8, 2)(torch.zeros(2, 5, 8, dtype=F64)),
            "x has dtype torch.float64 but the module's parameters have dtype torch.float32",
        ),
        (
            lambda: at.CausalSelfAttention.from_torch(nn.Linear(4, 4)),
            "from_torch takes an nn.MultiheadAttention",
        ),
        (
            lambda: at.cached_attention(
                torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8),
                (torch.zeros(2, 3, 4, 8, dtype=F64), torch.zeros(2, 3, 4, 8, dtype=F64)),
            ),
            "q_t has dtype torch.float32 but cache K has dtype torch.float64",
        ),
        (
            lambda: at.cached_attention(
                torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8),
                (torch.zeros(2, 3, 4, 8, device="meta"), torch.zeros(2, 3, 4, 8)),
            ),
            "q_t is on cpu but cache K is on meta",
        ),
        (
            lambda: at.induction_score(torch.zeros(2, 3, 6, 6, dtype=torch.long), 2),
            "weights has dtype torch.int64",
        ),
        (
            lambda: at.check_attention(at.attention, dtype=torch.int32),
            "dtype must be a floating-point torch.dtype, got torch.int32",
        ),
        (
            lambda: at.check_attention(at.attention, device="nowhere"),
            "device 'nowhere' is not a torch device",
        ),
    ],
)  # fmt: skip
def test_bad_input_raises_value_error_naming_it(call, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize(
    ("numpy_call", "torch_call"),
    [
        (lambda: an.softmax_backward(np.zeros((2, 5)), np.zeros((2, 5)), axis=-3),
         lambda: at.softmax_backward(torch.zeros(2, 5), torch.zeros(2, 5), axis=-3)),
        (lambda: an.attention_backward(
            np.zeros((2, 5, 8)), np.zeros((2, 7, 8)), np.zeros((2, 7, 3)), np.zeros((5, 3))),
         lambda: at.attention_backward(
            torch.zeros(2, 5, 8), torch.zeros(2, 7, 8), torch.zeros(2, 7, 3), torch.zeros(5, 3))),
        (lambda: an.cached_attention(
            np.zeros((2, 3, 1, 8)), np.zeros((2, 3, 1, 8)), np.zeros((2, 4, 1, 8))),
         lambda: at.cached_attention(
            torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8), torch.zeros(2, 4, 1, 8))),
        (lambda: an.cached_attention(
            np.zeros((2, 3, 1, 8)), np.zeros((2, 3, 1, 8)), np.zeros((2, 3, 1, 8)),
            [np.zeros((2, 3, 4, 8))]),
         lambda: at.cached_attention(
            torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8), torch.zeros(2, 3, 1, 8),
            [torch.zeros(2, 3, 4, 8)])),
        (lambda: an.induction_score(np.zeros((3, 5, 5)), 5),
         lambda: at.induction_score(torch.zeros(3, 5, 5), 5)),
    ],
)  # fmt: skip
def test_both_backends_word_errors_the_same(numpy_call, torch_call) -> None:
    with pytest.raises(ValueError) as from_numpy:
        numpy_call()
    with pytest.raises(ValueError) as from_torch:
        torch_call()
    assert str(from_numpy.value) == str(from_torch.value)
