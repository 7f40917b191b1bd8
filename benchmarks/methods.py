"""What the benchmarks measure: one attention problem, several ways to solve it.

A :class:`Problem` is multi-head self-attention on random float32 inputs of
shape ``(batch, heads, n, d)``. A :class:`Method` turns a problem into a
function of no arguments that computes the attention output, so that timing
and memory measurement never include making the inputs.

PyTorch is imported only by the methods that need it, so a NumPy-only
measurement (for example in :mod:`benchmarks.probe`) does not pay for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import attnlib.numpy as an

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Problem:
    """Self-attention on ``(batch, heads, n, d)`` float32 inputs drawn from N(0, 1)."""

    n: int
    heads: int = 8
    d: int = 64
    causal: bool = False
    batch: int = 1
    seed: int = 0

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.n, self.d)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Q, K, V``, each ``(batch, heads, n, d)`` float32."""
        rng = np.random.default_rng(self.seed)
        return tuple(rng.standard_normal(self.shape, dtype=np.float32) for _ in range(3))

    @property
    def score_bytes(self) -> int:
        """Bytes of one float32 ``(batch, heads, n, n)`` score matrix."""
        return an.score_matrix_bytes(self.batch, self.heads, self.n, self.n, 4)

    @property
    def flops(self) -> float:
        """Floating-point operations of the two products (causal: the visible half)."""
        full = self.batch * self.heads * an.attention_flops(self.n, self.n, self.d, self.d)
        return full * (self.n + 1) / (2 * self.n) if self.causal else float(full)


@dataclass(frozen=True)
class Method:
    """One implementation of attention.

    ``scores_held`` is how many score-sized ``(batch, heads, n, n)`` arrays it
    holds at once at its peak (0 for the chunked ones); it sizes the memory
    estimate that decides which problem sizes are skipped.
    """

    key: str
    label: str
    backend: str  # "numpy", "torch" (CPU) or "cuda"
    scores_held: int
    build: Callable[[Problem], Callable[[], object]]

    def estimate_bytes(self, problem: Problem) -> int:
        """A generous estimate of the peak memory of one call, inputs included."""
        qkv_out = 4 * problem.batch * problem.heads * problem.n * problem.d * 4
        return self.scores_held * problem.score_bytes + qkv_out + 64 * MiB


def _naive_numpy(p: Problem) -> Callable[[], np.ndarray]:
    Q, K, V = p.arrays()
    mask = an.causal_mask(p.n) if p.causal else None  # (n, n), made before timing
    return lambda: an.attention(Q, K, V, mask)[0]


def _chunked_numpy(p: Problem) -> Callable[[], np.ndarray]:
    Q, K, V = p.arrays()
    return lambda: an.chunked_attention(Q, K, V, causal=p.causal)


def _torch_inputs(p: Problem, device: str = "cpu"):
    import torch

    return tuple(torch.from_numpy(a).to(device) for a in p.arrays())


def _naive_torch(p: Problem) -> Callable[[], object]:
    """The textbook formula in torch: ``softmax(Q Kᵀ / sqrt(d)) V``, scores materialised."""
    import torch

    q, k, v = _torch_inputs(p)
    scale = 1.0 / math.sqrt(p.d)
    future = torch.ones(p.n, p.n, dtype=torch.bool).triu_(1) if p.causal else None

    def run():
        with torch.inference_mode():
            s = (q * scale) @ k.transpose(-2, -1)  # (B, h, n, n)
            if future is not None:
                s.masked_fill_(future, float("-inf"))
            return torch.softmax(s, dim=-1) @ v  # (B, h, n, d)

    return run


def _sdpa(device: str) -> Callable[[Problem], Callable[[], object]]:
    def build(p: Problem) -> Callable[[], object]:
        import torch
        import torch.nn.functional as F

        q, k, v = _torch_inputs(p, device)

        def run():
            with torch.inference_mode():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=p.causal)
            if device == "cuda":
                torch.cuda.synchronize()  # time the kernel, not its launch
            return out

        return run

    return build


NAIVE_NUMPY = Method("naive-numpy", "naive NumPy", "numpy", 3, _naive_numpy)
CHUNKED_NUMPY = Method("chunked-numpy", "chunked NumPy", "numpy", 0, _chunked_numpy)
NAIVE_TORCH = Method("naive-torch", "naive Torch", "torch", 2, _naive_torch)
SDPA_TORCH = Method("sdpa-torch", "Torch SDPA (CPU)", "torch", 0, _sdpa("cpu"))
SDPA_CUDA = Method("sdpa-cuda", "Torch SDPA (CUDA)", "cuda", 0, _sdpa("cuda"))

METHODS = {m.key: m for m in (NAIVE_NUMPY, CHUNKED_NUMPY, NAIVE_TORCH, SDPA_TORCH, SDPA_CUDA)}


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def to_numpy(out: object) -> np.ndarray:
    """A method's output as a float64 NumPy array (torch tensors are moved to the CPU)."""
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    return np.asarray(out, dtype=np.float64)
