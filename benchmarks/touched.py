"""``python -m benchmarks.touched``: the memory lesson 05's answers touch, the check's own reading.

Lesson 05's memory check (``attnlib.checks.lesson05.chunked_memory``) counts, besides what a call
of ``chunked_attention`` adds, the memory it reads or writes wherever it was taken
(``attnlib.checks.memory.touched``). This measures that reading for right answers written three
ways and for a naive attention writing its scores into a buffer taken before the call, at the
check's n = 4096 and at n = 2048, each setting (causal off, on) three times on fresh problems,
after a first call left unmeasured (PyTorch's first call starts its threads: 185 MiB at n = 2048;
the check takes the smaller of two readings for that).

Each page mode runs in a process of its own: ``small`` as the checks run (importing them asks for
small pages), ``huge`` with transparent huge pages allowed again, where the system offers them
(``/sys/kernel/mm/transparent_hugepage/enabled`` not ``never``). The process first frees every
other one of 20,000 small arrays, as a kernel that has run for a while holds a heap full of holes.
Results go to ``benchmarks/results/touched.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SIZES = (2048, 4096)
REPEATS = 3
BLOCK = 64


def online(Q, K, V, block_size, causal=False):
    """A learner's online softmax in NumPy, one key block at a time."""
    import numpy as np

    m, n = Q.shape[-2], K.shape[-2]
    top = np.full((m, 1), -np.inf)  # (m, 1)
    total, acc = np.zeros_like(top), 0.0
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        s = Q @ K[start:stop].T / math.sqrt(Q.shape[-1])  # (m, b)
        if causal:
            s = np.where(np.arange(start, stop) <= np.arange(m)[:, None], s, -np.inf)
        new = np.maximum(top, s.max(-1, keepdims=True))
        p, rescale = np.exp(s - new), np.exp(top - new)
        total = total * rescale + p.sum(-1, keepdims=True)
        acc = acc * rescale + p @ V[start:stop]  # (m, d_v)
        top = new
    return acc / total


def torch_blocks(Q, K, V, block_size, causal=False):
    """The same loop in PyTorch, over any leading dimensions. The tests grade its source as a
    learner's answer too (tests/test_memory_taken_ahead.py)."""
    import torch

    q, k, v = (torch.as_tensor(a) for a in (Q, K, V))  # (..., m, d_k), (..., n, d_k), (..., n, d_v)
    m, n = q.shape[-2], k.shape[-2]
    top = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)  # (..., m, 1)
    total, acc = torch.zeros_like(top), torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in range(0, n, block_size):
        keys = k[..., start : start + block_size, :]  # (..., b, d_k)
        s = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (..., m, b)
        if causal:
            late = torch.arange(start, min(start + block_size, n)) > torch.arange(m)[:, None]
            s = s.masked_fill(late, float("-inf"))
        new = torch.maximum(top, s.amax(-1, keepdim=True))
        p, rescale = torch.exp(s - new), torch.exp(top - new)
        total = total * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ v[..., start : start + block_size, :]  # (..., m, d_v)
        top = new
    return (acc / total).numpy()


def naive_into(n: int, dtype):
    """A naive attention writing its (n, n) scores into a buffer filled before any call."""
    import numpy as np

    buffer = np.ones((n, n), dtype)  # touched now

    def naive(Q, K, V, block_size, causal=False):
        S = buffer
        np.matmul(Q, K.T, out=S, casting="same_kind")
        S *= 1 / math.sqrt(Q.shape[-1])
        if causal:
            S[np.triu_indices(n, 1)] = -np.inf
        S -= S.max(-1, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(-1, keepdims=True)
        return S @ V

    return naive


def measure(pages: str) -> dict:
    """This process's readings, in MiB: {answer: {n: [touched per call]}} (see the module doc)."""
    import ctypes

    import numpy as np

    from attnlib.checks import memory
    from attnlib.numpy import chunked_attention

    if pages == "huge":
        ctypes.CDLL(None).prctl(memory.PR_SET_THP_DISABLE, 0, 0, 0, 0)
    sizes = np.random.default_rng(0).integers(100, 2000, 20_000)
    blocks = [np.ones(int(size)) for size in sizes]
    kept = blocks[::2]  # noqa: F841 — holes all over the heap while the answers run
    del blocks
    draw = np.random.default_rng()
    readings: dict[str, dict[int, list[float]]] = {}
    for n in SIZES:
        answers = {
            "reference (NumPy)": lambda Q, K, V, b, causal=False: chunked_attention(
                Q, K, V, block_size=b, causal=causal
            ),
            "online softmax (NumPy)": online,
            "key blocks (PyTorch)": torch_blocks,
            "naive, float64 buffer taken ahead": naive_into(n, np.float64),
            "naive, float32 buffer taken ahead": naive_into(n, np.float32),
        }
        for name, fn in answers.items():
            row = readings.setdefault(name, {}).setdefault(n, [])
            fn(*(draw.standard_normal((n, 16)) for _ in range(3)), BLOCK)  # PyTorch's threads
            for causal in (False, True):
                for _ in range(REPEATS):
                    Q, K, V = (draw.standard_normal((n, 16)) for _ in range(3))  # (n, 16) each
                    used = memory.touched(fn, Q, K, V, BLOCK, causal=causal)
                    row.append(round(used / 2**20, 1) if used is not None else None)
    return readings


def huge_pages_offered() -> bool:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[never]" not in text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", choices=("small", "huge"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pages:
        print(json.dumps(measure(args.pages)))
        return 0
    modes = ["small", "huge"] if huge_pages_offered() else ["small"]
    results = {}
    for mode in modes:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.touched", "--pages", mode],
            capture_output=True,
            text=True,
            check=True,
        )
        results[mode] = json.loads(done.stdout)
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    system = setting.read_text().strip() if setting.exists() else "not offered"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "touched.json").write_text(json.dumps({"thp": system, **results}, indent=1) + "\n")
    lines = [
        "# Memory lesson 05's answers touch (`python -m benchmarks.touched`)",
        "",
        f"Transparent huge pages on this system: `{system}`. The check allows half the (n, n)",
        "float64 score matrix: 16 MiB at n = 2048, 64 MiB at n = 4096 (the check's size).",
        f"MiB touched per call, {2 * REPEATS} calls (causal off, then on), fresh problems each,",
        "after one call left unmeasured.",
        "",
        "| pages | answer | " + " | ".join(f"n = {n}" for n in SIZES) + " |",
        "|---|---|" + "---|" * len(SIZES),
    ]
    for mode, readings in results.items():
        for name, by_n in readings.items():
            cells = [f"{min(v)}–{max(v)}" if None not in v else "untold" for v in by_n.values()]
            lines.append(f"| {mode} | {name} | " + " | ".join(cells) + " |")
    (RESULTS / "touched.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
