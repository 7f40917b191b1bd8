"""``python -m benchmarks``: time and memory of attention against the sequence length.

For every method (naive NumPy, chunked NumPy, naive Torch, Torch SDPA, and
Torch SDPA on CUDA when there is a GPU) and every size ``n``:

* time: best of ``--repeats`` runs after one warm-up (:func:`attnlib.measure.time_call`);
* peak extra memory: ``tracemalloc`` for NumPy (:func:`attnlib.measure.peak_memory`),
  the CUDA allocator's peak on the GPU, and for the CPU torch methods — which
  ``tracemalloc`` cannot see — the peak resident-set growth in a fresh process
  (:mod:`benchmarks.probe`), which is also measured for every CPU method so the
  backends can be compared on one scale.

Sizes whose estimated peak memory exceeds the budget (``--mem-budget-gib``, and
at most 60% of the memory available) are skipped and listed as such: the naive
methods hold ``(h, n, n)`` score matrices, 8 GiB each at n=16384.

Then a head-to-head at ``--h2h-n`` (4096): chunked NumPy against Torch SDPA,
causal and not, alternating runs so both see the same machine, with the
largest absolute difference of their outputs.

Writes ``results.md``, ``results.csv``, ``headtohead.csv``, ``machine.json``
and ``scaling.png`` (log-log time and memory with fitted exponents) to ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from attnlib.measure import peak_memory, time_call

from . import machine, report
from .methods import (
    CHUNKED_NUMPY,
    METHODS,
    SDPA_TORCH,
    GiB,
    Method,
    Problem,
    cuda_available,
    to_numpy,
)
from .probe import measure_in_fresh_process
from .report import HeadToHead, Result

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
# After a multi-threaded call, OpenBLAS's threads spin for about 0.1 s and OpenMP's (PyTorch's)
# for a moment too, holding cores the next measurement needs: pause this long before timing.
SETTLE_S = 0.2
DEFAULT_SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384]
QUICK_SIZES = [128, 256]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time and peak memory of naive vs chunked attention, NumPy vs PyTorch.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a fast smoke run: sizes {QUICK_SIZES}, 2 repeats, head-to-head at n=512, "
        "no waiting for a quiet machine",
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", help=f"sequence lengths (default {DEFAULT_SIZES})"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed runs per measurement, best kept (default 3)"
    )
    parser.add_argument("--heads", type=int, default=8, help="attention heads h (default 8)")
    parser.add_argument("--dim", type=int, default=64, help="head width d (default 64)")
    parser.add_argument("--causal", action="store_true", help="sweep with a causal mask")
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=sorted(METHODS),
        help="methods to sweep (default all; sdpa-cuda only with a GPU)",
    )
    parser.add_argument(
        "--h2h-n",
        type=int,
        help="n of the chunked NumPy vs SDPA head-to-head; 0 skips it (default 4096)",
    )
    parser.add_argument(
        "--mem-budget-gib",
        type=float,
        default=8.0,
        help="skip sizes whose estimated peak memory exceeds this (default 8)",
    )
    parser.add_argument(
        "--no-rss",
        action="store_true",
        help="skip the fresh-process resident-memory probes (faster; no torch memory)",
    )
    parser.add_argument(
        "--probe-jobs",
        type=int,
        help="fresh-process memory probes run at once, after all timing (default 1; --quick 2)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        help="before each timing, wait up to this many seconds for other processes to use "
        "< 10%% of the CPUs (default 10; --quick 0)",
    )
    parser.add_argument(
        "--fit-min-n",
        type=int,
        default=1024,
        help="fit exponents on sizes n >= this (default 1024; all sizes if fewer than two)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else DEFAULT_SIZES
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    if args.h2h_n is None:
        args.h2h_n = 512 if args.quick else 4096
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.quick else 10.0
    if args.probe_jobs is None:
        args.probe_jobs = 2 if args.quick else 1
    args.attempts = 1 if args.quick else 3  # timings retried while other processes are busy
    if min(args.sizes) < 1 or min(args.repeats, args.probe_jobs) < 1 or args.h2h_n < 0:
        parser.error("sizes, --repeats and --probe-jobs must be positive, --h2h-n non-negative")
    args.sizes = sorted(set(args.sizes))
    return args


def memory_budget(requested_gib: float) -> float:
    """Bytes a single measurement may use: the request, capped at 60% of what is available."""
    available = machine.available_memory()
    budget = requested_gib * GiB
    return budget if available is None else min(budget, 0.6 * available)


def measure(method: Method, problem: Problem, args: argparse.Namespace, budget: float) -> Result:
    """Time and in-process memory of one method at one size (or why it was skipped).

    Timing waits for a quiet machine (up to ``--quiet-wait`` seconds) and is
    tried up to three times (once with ``--quick``) while other processes take
    5% of the CPUs or more;
    the best time is kept, with the share of the CPUs others used meanwhile.
    The fresh-process memory probes run later, all together (:func:`probe_memory`).
    """
    r = Result(method.key, method.label, problem.n, problem.heads, problem.d, problem.causal)
    need = method.estimate_bytes(problem)
    if need > budget:
        r.status = "skipped"
        r.note = f"needs about {need / GiB:.1f} GiB, over the {budget / GiB:.1f} GiB budget"
        return r
    fn = method.build(problem)
    attempts = []
    for _ in range(args.attempts):
        machine.wait_for_quiet(args.quiet_wait)
        time.sleep(SETTLE_S)
        with machine.OtherProcessesCpu() as others:
            seconds = time_call(fn, repeats=args.repeats, warmup=1)
        share = math.nan if others.share is None else others.share
        attempts.append((seconds, share))
        if math.isnan(share) or share < 0.05:
            break
    r.time_s, r.others_cpu = min(attempts)
    r.gflops = problem.flops / r.time_s / 1e9
    if method.backend == "numpy":
        r.peak_bytes, r.peak_source = peak_memory(fn), "tracemalloc"
    elif method.backend == "cuda":
        r.peak_bytes, r.peak_source = _cuda_peak(fn), "CUDA allocator peak"
    elif method.backend == "torch":
        r.peak_source = "not measured (--no-rss)"  # until probe_memory
    r.output_bytes = float(problem.batch * problem.heads * problem.n * problem.d * 4)
    del fn
    gc.collect()
    return r


def _cuda_peak(fn) -> float:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    return float(torch.cuda.max_memory_allocated() - before)


def _or_nan(x: int | None) -> float:
    return math.nan if x is None else float(x)


def sweep(methods: Sequence[Method], args: argparse.Namespace, budget: float) -> list[Result]:
    jobs = [(m, n) for m in methods for n in args.sizes]
    results = []
    for method, n in tqdm(jobs, desc="sweep", unit="run", file=sys.stderr):
        problem = Problem(n, args.heads, args.dim, args.causal)
        r = measure(method, problem, args, budget)
        if not r.ok:
            tqdm.write(f"skipped {method.label} at n={n}: {r.note}", file=sys.stderr)
        results.append(r)
    return results


def head_to_head(args: argparse.Namespace) -> list[HeadToHead]:
    """Chunked NumPy vs Torch SDPA at ``args.h2h_n``, causal and not, runs alternating.

    Each case is timed up to three times (as in :func:`measure`); the attempt in
    which other processes used the least CPU is reported, with that share.
    """
    repeats = args.repeats if args.quick else max(args.repeats, 5)
    rows = []
    for causal in tqdm((False, True), desc="head-to-head", unit="case", file=sys.stderr):
        problem = Problem(args.h2h_n, args.heads, args.dim, causal)
        chunked, sdpa = CHUNKED_NUMPY.build(problem), SDPA_TORCH.build(problem)
        load_before = _load()
        attempts = []
        for _ in range(args.attempts):
            machine.wait_for_quiet(args.quiet_wait)
            with machine.OtherProcessesCpu() as others:
                times = _alternate(chunked, sdpa, repeats)
            share = math.nan if others.share is None else others.share
            attempts.append((share, *times))
            if math.isnan(share) or share < 0.05:  # quiet enough (or unknown): stop
                break
        # the attempt in which other processes used the least CPU
        share, chunked_s, sdpa_s = min(attempts, key=lambda a: 0 if math.isnan(a[0]) else a[0])
        load_after = _load()
        diff = float(np.max(np.abs(to_numpy(chunked()) - to_numpy(sdpa()))))
        rows.append(
            HeadToHead(
                n=problem.n,
                heads=problem.heads,
                d=problem.d,
                causal=causal,
                chunked_s=chunked_s,
                sdpa_s=sdpa_s,
                chunked_peak_bytes=float(peak_memory(chunked)),
                chunked_rss_bytes=math.nan,  # filled in by probe_memory
                sdpa_rss_bytes=math.nan,
                max_abs_diff=diff,
                load_before=load_before,
                load_after=load_after,
                others_cpu=share,
            )
        )
    return rows


def probe_memory(results: list[Result], h2h: list[HeadToHead], jobs: int) -> None:
    """Fill in the fresh-process resident-memory growth of every CPU measurement.

    Runs after all timing, so the probes' processes never share the CPUs with a
    timed run; ``jobs`` probes run at once (memory numbers are per process, so
    running them side by side does not change them).
    """
    wanted: list[tuple[str, Problem]] = []
    for r in results:
        if r.ok and METHODS[r.method].backend != "cuda":
            wanted.append((r.method, Problem(r.n, r.heads, r.d, r.causal)))
    for h in h2h:
        problem = Problem(h.n, h.heads, h.d, h.causal)
        wanted += [(CHUNKED_NUMPY.key, problem), (SDPA_TORCH.key, problem)]
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(measure_in_fresh_process, key, p) for key, p in wanted]
        progress = tqdm(futures, desc="memory probes", unit="process", file=sys.stderr)
        found = {want: _or_nan(f.result()) for want, f in zip(wanted, progress, strict=True)}
    for r in results:
        key = (r.method, Problem(r.n, r.heads, r.d, r.causal))
        if key in found:
            r.rss_bytes = found[key]
            if METHODS[r.method].backend == "torch":
                r.peak_bytes, r.peak_source = r.rss_bytes, "RSS growth in a fresh process"
    for h in h2h:
        problem = Problem(h.n, h.heads, h.d, h.causal)
        h.chunked_rss_bytes = found[(CHUNKED_NUMPY.key, problem)]
        h.sdpa_rss_bytes = found[(SDPA_TORCH.key, problem)]


def _alternate(first, second, repeats: int) -> tuple[float, float]:
    """Best times of two functions, run in turn so that both see the same machine."""
    a = b = math.inf
    for _ in range(repeats):
        time.sleep(SETTLE_S)
        a = min(a, time_call(first, repeats=1, warmup=1))
        time.sleep(SETTLE_S)
        b = min(b, time_call(second, repeats=1, warmup=1))
    return a, b


def _load() -> str:
    load = machine.load_average()
    return "n/a" if load is None else f"{load[0]:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m benchmarks" + "".join(
        " " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    info = machine.machine_info()
    lines = machine.describe(info)
    print("\n".join(lines), flush=True)

    keys = args.methods or [k for k in METHODS if k != "sdpa-cuda" or cuda_available()]
    methods = [METHODS[k] for k in keys]
    if "sdpa-cuda" in keys and not cuda_available():
        print("note: CUDA is not available; skipping sdpa-cuda", file=sys.stderr)
        methods = [m for m in methods if m.backend != "cuda"]
    budget = memory_budget(args.mem_budget_gib)
    print(f"Memory budget per measurement: {budget / GiB:.1f} GiB", flush=True)

    results = sweep(methods, args, budget)
    h2h = head_to_head(args) if args.h2h_n else []
    if not args.no_rss:
        probe_memory(results, h2h, args.probe_jobs)

    args.out.mkdir(parents=True, exist_ok=True)
    info["load_average_after"] = machine.load_average()
    end_load = info["load_average_after"]
    lines.append(
        f"Load average at the end: {' / '.join(map(str, end_load)) if end_load else 'n/a'}"
    )
    text = report.markdown(results, h2h, lines, command, args.repeats, args.fit_min_n)
    (args.out / "results.md").write_text(text + "\n")
    (args.out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")
    written = ["results.md", "machine.json"]
    report.write_csv(results, args.out / "results.csv")
    written += ["results.csv"] if results else []
    report.write_csv(h2h, args.out / "headtohead.csv")
    written += ["headtohead.csv"] if h2h else []
    if any(r.ok for r in results):
        report.plot(results, args.out / "scaling.png", args.fit_min_n)
        written.append("scaling.png")
    print()
    print(text)
    print(f"Wrote {', '.join(written)} to {args.out}")
    return 0
