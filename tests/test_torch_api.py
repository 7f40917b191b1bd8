"""attnlib.torch as a whole: the contract's names, devices, and GPU checks where there is one."""

from __future__ import annotations

import inspect

import pytest
import torch
from contract import LESSON06 as LESSON06_BOTH
from contract import NAMES, SHARED_EXTRAS, TORCH_ONLY

import attnlib.torch as at

F64 = torch.float64

CONTRACT = list(NAMES)
EXTRAS = [*SHARED_EXTRAS, "device", "MultiHeadAttention"]
LESSON06 = [*LESSON06_BOTH, *TORCH_ONLY]


def test_every_contract_name_is_exported() -> None:
    assert len(CONTRACT) == 20
    for name in CONTRACT + EXTRAS + LESSON06:
        assert name in at.__all__, name
        assert callable(getattr(at, name)), name
    assert sorted(at.__all__) == sorted(set(at.__all__))
    assert set(at.__all__) == set(CONTRACT + EXTRAS + LESSON06)


@pytest.mark.parametrize("name", CONTRACT + EXTRAS + LESSON06)
def test_public_names_are_documented(name: str) -> None:
    doc = inspect.getdoc(getattr(at, name))
    assert doc and len(doc.splitlines()) >= 3, name
    assert "Returns:" in doc or name in ("MultiHeadAttention", "CausalSelfAttention"), name


def test_contract_signatures() -> None:
    params = {name: list(inspect.signature(getattr(at, name)).parameters) for name in CONTRACT}
    assert params["attention"][:5] == ["Q", "K", "V", "mask", "need_weights"]
    assert params["additive_scores"] == ["Q", "K", "W_q", "W_k", "v"]
    assert params["softmax"] == ["x", "axis", "temperature"]
    assert params["multi_head_attention"][:8] == [
        "X_q", "X_kv", "W_q", "W_k", "W_v", "W_o", "num_heads", "mask",
    ]  # fmt: skip
    assert params["chunked_attention"] == ["Q", "K", "V", "block_size", "causal"]
    assert inspect.signature(at.chunked_attention).parameters["block_size"].default == 128


# ------------------------------------------------------------------------------------ devices


def gpu_available() -> bool:
    return torch.cuda.is_available() or torch.backends.mps.is_available()


def test_device_picks_cuda_then_mps_then_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert at.device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert at.device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert at.device() == torch.device("cuda")


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_device_is_cpu_without_a_gpu() -> None:
    assert at.device() == torch.device("cpu")
    assert isinstance(at.device(), torch.device)


def test_everything_runs_on_the_meta_device() -> None:
    """Meta tensors carry no data: any tensor created on a hardcoded device would clash."""
    meta = torch.device("meta")

    def t(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, device=meta)

    Q, K, V = t(2, 3, 5, 4), t(2, 3, 6, 4), t(2, 3, 6, 2)
    mask = torch.ones(5, 6, dtype=torch.bool, device=meta)
    results = [
        at.dot_scores(Q, K),
        at.scaled_dot_scores(Q, K),
        at.cosine_scores(Q, K),
        at.additive_scores(Q, K, t(4, 3), t(4, 3), t(3)),
        at.softmax(Q, axis=1),
        at.masked_softmax(t(5, 6), mask),
        *at.attention(Q, K, V, mask),
        at.attention(Q, K, V, need_weights=False)[0],
        *at.hard_attention(Q, K, V, mask),
        at.chunked_attention(Q, K, V, block_size=4),
        at.chunked_attention(Q, K, V, block_size=4, causal=True),
        *at.self_attention(t(2, 5, 4), t(4, 3), t(4, 3), t(4, 2), at.causal_mask(5, meta)),
        *at.cross_attention(t(2, 5, 4), t(2, 6, 3), t(4, 3), t(3, 3), t(3, 2)),
        at.split_heads(t(2, 5, 6), 3),
        at.merge_heads(t(2, 3, 5, 2)),
        *at.multi_head_attention(t(2, 5, 6), t(2, 6, 6), t(6, 6), t(6, 6), t(6, 6), t(6, 6), 3),
        at.sinusoidal_encoding(5, 6, device=meta),
        at.to_additive_mask(mask),
        at.from_key_padding_mask(torch.zeros(2, 6, dtype=torch.bool, device=meta)),
        at.MultiHeadAttention(6, 3, bias=True, device=meta)(t(2, 5, 6))[0],
    ]
    for r in results:
        assert r.device == meta


# ------------------------------------------------------------------ on a GPU, when there is one

requires_gpu = pytest.mark.skipif(not gpu_available(), reason="needs a CUDA or MPS device")


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("need_weights", [True, False])
def test_attention_on_the_gpu_matches_the_cpu(need_weights: bool) -> None:
    dev = at.device()
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 3, 7, 8, generator=gen) for _ in range(3))
    mask = torch.rand(2, 1, 7, 7, generator=gen) < 0.6
    mask[0, 0, 3] = False  # a fully masked row: fused kernels would give NaN
    for t in (Q, K, V):
        t.requires_grad_()
    cpu_out, _ = at.attention(Q, K, V, mask, need_weights=need_weights)
    args = [x.detach().to(dev).requires_grad_() for x in (Q, K, V)]
    out, weights = at.attention(*args, mask.to(dev), need_weights=need_weights)
    assert out.device.type == dev.type
    torch.testing.assert_close(out.cpu(), cpu_out.detach(), rtol=1e-4, atol=1e-4)
    grads = torch.autograd.grad(out.sum(), args)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_and_causal_fast_path_on_the_gpu(dtype: torch.dtype) -> None:
    dev = at.device()
    gen = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(2, 4, 64, 32, generator=gen).to(dev, dtype) for _ in range(3))
    mask = at.causal_mask(64, device=dev)
    out, _ = at.attention(Q, K, V, mask, need_weights=False)
    chunked = at.chunked_attention(Q, K, V, block_size=16, causal=True)
    expected, _ = at.attention(Q.double(), K.double(), V.double(), mask)
    assert out.dtype == dtype and chunked.dtype == dtype
    tolerance = {torch.float16: 5e-3, torch.bfloat16: 4e-2}[dtype]
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=tolerance)
    torch.testing.assert_close(chunked.double(), expected, rtol=0, atol=tolerance)


@pytest.mark.gpu
@requires_gpu
def test_module_and_sampler_on_the_gpu() -> None:
    dev = at.device()
    module = at.MultiHeadAttention(16, 4, bias=True).to(dev)
    x = torch.randn(2, 5, 16, device=dev)
    out, weights = module(x, mask=at.padding_mask(torch.tensor([5, 2], device=dev), 5))
    assert out.device.type == dev.type and weights.device.type == dev.type
    gen = torch.Generator(device=dev).manual_seed(0)
    _, hard = at.sampled_hard_attention(x, x, x, generator=gen)
    assert hard.device.type == dev.type
    torch.testing.assert_close(hard.sum(-1).cpu(), torch.ones(2, 5))
