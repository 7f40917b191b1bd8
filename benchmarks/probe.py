"""Peak resident-memory growth of one attention call, measured in a fresh process.

``tracemalloc`` sees NumPy's allocations but not PyTorch's, so the benchmarks
also measure every CPU method the way the operating system sees it: in a new
Python process, make the inputs, run the method once on a tiny problem (so
one-off library set-up — thread pools, BLAS buffers, kernel caches — is not
counted), reset the kernel's high-water mark and run the real call once. The
number is the peak resident set during that call minus the resident set just
before it: the output and every temporary that was actually touched.

A fresh process matters: in a long-lived one, memory freed by an earlier call
may still be held by an allocator and reused without the resident set growing.

Run as ``python -m benchmarks.probe METHOD N [--heads H] [--d D] [--causal]``;
prints one line of JSON, ``{"rss_growth_bytes": ...}`` (``null`` where the
kernel cannot reset the high-water mark).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from attnlib.measure import peak_rss_growth

from .methods import METHODS, Problem

ROOT = Path(__file__).resolve().parent.parent


def measure_here(method_key: str, problem: Problem) -> int | None:
    """Warm the method up on a tiny problem, then measure ``problem`` (this process)."""
    method = METHODS[method_key]
    method.build(Problem(n=64, heads=2, d=problem.d, causal=problem.causal))()
    fn = method.build(problem)
    gc.collect()
    return peak_rss_growth(fn)


def measure_in_fresh_process(method_key: str, problem: Problem, timeout: float = 600) -> int | None:
    """Run :func:`measure_here` in a new Python process and return its answer."""
    cmd = [sys.executable, "-m", "benchmarks.probe", method_key, str(problem.n)]
    cmd += ["--heads", str(problem.heads), "--d", str(problem.d), "--batch", str(problem.batch)]
    if problem.causal:
        cmd.append("--causal")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), _pythonpath()]))}
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])["rss_growth_bytes"]


def _pythonpath() -> str:
    return os.environ.get("PYTHONPATH", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe", description=__doc__)
    parser.add_argument("method", choices=sorted(METHODS))
    parser.add_argument("n", type=int)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args(argv)
    problem = Problem(args.n, args.heads, args.d, args.causal, args.batch)
    print(json.dumps({"rss_growth_bytes": measure_here(args.method, problem)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
