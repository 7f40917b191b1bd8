"""Exact attention in key blocks with an online softmax (the idea behind FlashAttention).

Naive attention holds the whole ``(..., m, n)`` score matrix. Here the keys
are visited ``block_size`` at a time while three running quantities are kept
per query row:

* ``peak``  — the largest score seen so far ``(..., m, 1)``;
* ``total`` — the softmax denominator so far, relative to ``peak`` ``(..., m, 1)``;
* ``acc``   — the weighted sum of values so far, relative to ``peak`` ``(..., m, d_v)``.

When a block raises the peak, the old ``total`` and ``acc`` are rescaled by
``exp(old_peak - new_peak)``; after the last block ``acc / total`` is exactly
``softmax(scores) @ V``.

How this file makes that fast (the result does not change):

* **Tiles, not stripes.** The queries are cut into blocks as well, so the work
  is a grid of ``(query block, key block)`` tiles. One tile of scores (about
  1 MiB) stays in the CPU's cache while it is exponentiated and multiplied by
  ``V``; the running ``total``/``acc`` of one query block are tiny.
* **Causal tiles.** With ``causal=True``, query ``i`` may see key ``j`` only if
  ``j <= i``. Tiles whose keys all lie in the future of all their queries are
  never computed (about half the grid); where the tiles cross the diagonal they
  are made smaller and only they pay for a triangular mask.
* **A lazy peak.** Any offset subtracted before ``exp`` gives the same ratio
  ``acc / total``; the peak is merely the safe choice. So each query keeps the
  offset it got from the first key block for as long as later blocks stay
  within a factor ``2^12`` of it on average, and is recomputed exactly only when
  they do not (rarely: the first block already holds typical scores). A fixed
  offset can ride inside the matrix product — ``[q, -offset] · [k, 1]`` —
  which saves two passes over every tile (the maximum and the subtraction).
* **Base 2.** ``exp(x) = 2 ** (x · log2 e)``, and NumPy's ``exp2`` is about
  twice as fast as its ``exp``. So the queries are scaled by
  ``log2(e) / sqrt(d_k)`` instead of ``1 / sqrt(d_k)``, and the scores, peaks
  and offsets below are all in base 2 (FlashAttention does the same).
* **No hidden copies.** Every temporary lives in a buffer allocated once per
  worker and is overwritten in place (``np.matmul(..., out=)``,
  ``np.exp2(s, out=s)``); float32 stays float32 (the scale is a Python float).
* **Threads.** Query blocks (of the same or of different heads) are
  independent, so a few threads share them out. NumPy releases the GIL inside
  ``matmul`` and ``exp2``, so the threads really run in parallel; BLAS is told
  to use one thread each meanwhile (with ``threadpoolctl``) so the cores are not
  oversubscribed. Problems too small to gain from threads run on one.

:func:`chunked_attention` is the lesson's function; :func:`tiled_attention` is the
engine underneath, with its knobs (tile sizes, number of threads) exposed.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from .._shapes import check_positive_int, check_qkv
from ._validate import as_float

DEFAULT_BLOCK_SIZE = None  # None: choose the key block from the dtype (see choose_blocks)

TILE_BYTES = 1 << 20  # one (key block, query block) score tile; fits a 1–2 MiB L2 cache
MAX_BLOCK_Q = 1024  # queries per tile at most
MIN_BLOCK_Q = 64  # queries per tile at least, when blocks are split to keep threads busy
SMALL_PROBLEM = 1 << 19  # fewer visible scores than this: threads cost more than they save
DIAGONAL_SPLIT = 4  # key blocks that cross the diagonal are this many times smaller
GROWTH_LIMIT = 2.0**12  # mean exp2(score - offset) of a block above this: new offset
LOG2E = math.log2(math.e)  # scores are kept in base 2: exp(x) == exp2(x * LOG2E)


def chunked_attention(Q, K, V, block_size: int | None = DEFAULT_BLOCK_SIZE, causal: bool = False):
    """Scaled dot-product attention computed over key blocks, in ``O(m·block_size)`` memory.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``; leading axes of Q, K, V broadcast.
      block_size: keys per block; at most ``(..., m, block_size)`` scores exist at once.
        ``None`` (the default) picks a block that fits the CPU cache (512 keys in float32).
      causal: if True, query ``i`` attends to keys ``j <= i`` only (as
        :func:`causal_mask`, also when ``m != n``); key blocks entirely in the
        future are skipped.

    Returns:
      output ``(..., m, d_v)``, equal to ``attention(Q, K, V, mask)[0]``, in the
      dtype of the inputs (float16 is computed in float32 and rounded at the end).
    """
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    check_qkv(Q.shape, K.shape, V.shape)
    if block_size is not None:
        block_size = check_positive_int("block_size", block_size)
    return tiled_attention(Q, K, V, block_k=block_size, causal=causal)  # all the work


def tiled_attention(
    Q,
    K,
    V,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    causal: bool = False,
    workers: int | None = None,
) -> np.ndarray:
    """The engine of :func:`chunked_attention`, with its knobs exposed.

    Args:
      Q, K, V: as for :func:`chunked_attention`.
      block_q: queries per tile; ``None`` chooses from the cache size.
      block_k: keys per tile (the lesson's ``block_size``); ``None`` chooses from the cache size.
      causal: query ``i`` sees keys ``j <= i`` only.
      workers: threads; ``None`` uses as many as NumPy's BLAS may use (so
        ``threadpoolctl.threadpool_limits(1)`` makes this single-threaded), and
        one for small problems.

    Returns:
      output ``(..., m, d_v)`` in ``np.result_type(Q, K, V)``.
    """
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    _, out_shape = check_qkv(Q.shape, K.shape, V.shape)
    block_q, block_k, workers = (
        None if x is None else check_positive_int(name, x)
        for name, x in (("block_q", block_q), ("block_k", block_k), ("workers", workers))
    )
    batch, m, n = out_shape[:-2], Q.shape[-2], K.shape[-2]
    out_dtype = np.result_type(Q, K, V)
    if math.prod(out_shape) == 0 or n == 0:  # no queries, or no keys: nothing to attend to
        return np.zeros(out_shape, dtype=out_dtype)

    dtype = np.promote_types(out_dtype, np.float32)  # compute float16 in float32
    Q, K, V = (_blas_ready(X, dtype) for X in (Q, K, V))
    out = np.empty(out_shape, dtype=dtype)  # (..., m, d_v), every row written below
    if workers is None:
        visible = math.prod(batch) * m * n // (2 if causal else 1)  # scores to compute
        workers = 1 if visible < SMALL_PROBLEM else _blas_threads()
    auto_q = block_q is None
    block_q, block_k = choose_blocks(m, n, dtype, block_q, block_k)
    if auto_q and workers > 1:  # smaller query blocks if that keeps every thread busy
        per_entry = math.ceil(2 * workers / math.prod(batch))  # blocks per batch entry
        block_q = min(block_q, max(MIN_BLOCK_Q, math.ceil(m / per_entry)))
    Qb = np.broadcast_to(Q, (*batch, *Q.shape[-2:]))  # (..., m, d_k), views, no copies
    Kb = np.broadcast_to(K, (*batch, *K.shape[-2:]))  # (..., n, d_k)
    Vb = np.broadcast_to(V, (*batch, *V.shape[-2:]))  # (..., n, d_v)
    scale = LOG2E / math.sqrt(Q.shape[-1])  # base-2 scores; a Python float keeps float32

    def run(task: tuple[tuple[int, ...], int], scratch: _Scratch) -> None:
        b, q0 = task  # batch index, first query of the block
        q1 = min(q0 + block_q, m)
        _attend_query_block(
            Qb[b][q0:q1], Kb[b], Vb[b], out[b][q0:q1], q0, block_k, scale, causal, scratch
        )

    tasks = _query_block_tasks(batch, m, block_q, causal)
    workers = min(workers, len(tasks))
    d_k, d_v = Q.shape[-1], V.shape[-1]
    _run_tasks(tasks, run, lambda: _Scratch(block_q, block_k, d_k, d_v, dtype), workers)
    return out.astype(out_dtype, copy=False)


def _attend_query_block(q, K, V, out, q0, block_k, scale, causal, scratch) -> None:
    """Online softmax of one block of queries over its key blocks; writes ``out``.

    Args:
      q: queries ``(bq, d_k)``, rows ``q0 .. q0 + bq - 1`` of Q (unscaled).
      K, V: all keys ``(n, d_k)`` and values ``(n, d_v)`` of this batch entry.
      out: ``(bq, d_v)``, receives ``softmax2(q Kᵀ · scale) V``, the softmax in
        base 2 (``scale`` includes ``log2 e``, so this is the usual attention).

    Each score tile is stored *transposed*, keys down and queries across,
    ``s[j, i] = score(query i, key j)``: the reductions over keys (sums) then
    combine whole contiguous rows, which NumPy vectorises well.
    """
    bq, d_k = q.shape
    run = scratch.running(bq)
    np.multiply(q, scale, out=run.qa[:, :d_k])  # scale the queries once, not every score

    # exp2 may overflow where an offset is stale: _next_tile notices and redoes those queries
    with np.errstate(over="ignore"):
        for k0, k1, first in _key_blocks(q0, bq, K.shape[0], block_k, causal):
            # keys k0 .. k1-1 against the queries from `first` on (earlier ones see none of them)
            s = scratch.tile(k1 - k0, bq - first)  # (b, bq')
            Kb, Vb = K[k0:k1], V[k0:k1]  # (b, d_k), (b, d_v)
            if k0 == 0:  # every query sees key 0, so this block covers them all
                _first_tile(s, Kb, Vb, run, q0, causal)
            else:
                _next_tile(
                    s, Kb, Vb, scratch.keys(k1 - k0), run.after(first), k0, q0 + first, causal
                )
    np.divide(run.acc, run.total.T, out=out)  # (bq, d_v); total >= 1 for every query


@dataclass
class _Running:
    """What one block of queries carries from key block to key block (views of scratch)."""

    qa: np.ndarray  # (bq, d_k + 1) = [q · scale | -offset]
    total: np.ndarray  # (1, bq) softmax denominators, relative to the offsets
    acc: np.ndarray  # (bq, d_v) weighted sums of values, relative to the offsets
    col_sum: np.ndarray  # (1, bq) scratch: one key block's share of total
    part: np.ndarray  # (bq, d_v) scratch: one key block's share of acc

    def after(self, first: int) -> _Running:
        """The same, for the queries from ``first`` on."""
        return _Running(
            self.qa[first:],
            self.total[:, first:],
            self.acc[first:],
            self.col_sum[:, first:],
            self.part[first:],
        )


def _first_tile(s, Kb, Vb, run: _Running, q0, causal) -> None:
    """The first key block: the offsets become the exact peaks of its scores.

    ``s`` ``(b, bq)`` scratch; ``Kb`` ``(b, d_k)``; ``Vb`` ``(b, d_v)``; queries ``q0 ..``.
    """
    d_k = Kb.shape[1]
    np.matmul(Kb, run.qa[:, :d_k].T, out=s)  # (b, bq) scores
    if causal:
        _mask_diagonal(s, 0, q0)
    offset = s.max(axis=0)  # (bq,), finite: key 0 is visible to every query
    np.subtract(s, offset, out=s)
    np.exp2(s, out=s)  # (b, bq), each in (0, 1]
    run.qa[:, d_k] = -offset  # later blocks subtract it inside their product
    np.sum(s, axis=0, keepdims=True, out=run.total)  # (1, bq)
    np.matmul(s.T, Vb, out=run.acc)  # (bq, b) @ (b, d_v)


def _next_tile(s, Kb, Vb, ka, run: _Running, k0, q_first, causal) -> None:
    """A later key block: ``exp2(score - offset)`` from one product, offsets raised if needed.

    ``s`` ``(b, bq')`` scratch; ``ka`` ``(b, d_k + 1)`` scratch whose last column
    holds ones, so that ``ka @ qa.T`` is ``k · q · scale - offset`` for every pair;
    ``run`` covers the queries ``q_first ..``.
    """
    d_k = Kb.shape[1]
    ka[:, :d_k] = Kb
    np.matmul(ka, run.qa.T, out=s)  # (b, bq') scores minus each query's offset
    if causal:
        _mask_diagonal(s, k0, q_first)
    np.exp2(s, out=s)  # (b, bq') probabilities relative to the offsets
    np.sum(s, axis=0, keepdims=True, out=run.col_sum)  # (1, bq')
    # An offset far below this block's scores makes exp2 huge (or inf, or nan):
    # recompute those queries exactly with a higher offset.
    stale = np.flatnonzero(~(run.col_sum[0] <= s.shape[0] * GROWTH_LIMIT))
    if stale.size:
        _raise_offsets(stale, s, Kb, run, k0, q_first, causal)
    run.total += run.col_sum
    run.acc += np.matmul(s.T, Vb, out=run.part)  # (bq', b) @ (b, d_v)


def _raise_offsets(cols, s, Kb, run: _Running, k0, q_first, causal) -> None:
    """Redo queries ``cols`` of a tile the classic way: new peak, rescale what came before."""
    d_k = Kb.shape[1]
    old = -run.qa[cols, d_k]  # (c,) current offsets
    raw = Kb @ run.qa[cols, :d_k].T  # (b, c) the scores themselves
    if causal:
        _hide_future_keys(raw, k0, q_first + cols)
    new = np.maximum(raw.max(axis=0), old)  # (c,)
    np.exp2(raw - new, out=raw)  # (b, c) in (0, 1]
    s[:, cols] = raw
    run.col_sum[0, cols] = raw.sum(axis=0)
    shrink = np.exp2(old - new)  # (c,) <= 1: what came before, rescaled to the new offset
    run.total[0, cols] *= shrink
    run.acc[cols] *= shrink[:, None]
    run.qa[cols, d_k] = -new


def _key_blocks(q0: int, bq: int, n: int, block_k: int, causal: bool):
    """The key blocks queries ``q0 .. q0 + bq - 1`` need, as ``(k0, k1, first)``.

    ``first`` is the first query (counted from ``q0``) that sees any key of the
    block. Without ``causal`` that is always 0 and the blocks cover all ``n``
    keys. With ``causal`` the keys stop at the last query (later keys are in
    everybody's future), and where the blocks cross the diagonal they are made
    four times smaller, so that little of the masked upper triangle is computed.
    """
    if not causal:
        for k0 in range(0, n, block_k):
            yield k0, min(k0 + block_k, n), 0
        return
    stop, fine = min(n, q0 + bq), max(1, block_k // DIAGONAL_SPLIT)
    k0 = 0
    while k0 < stop:
        below_diagonal = k0 + block_k - 1 <= q0  # every key visible to every query
        k1 = min(k0 + (block_k if below_diagonal else fine), stop)
        yield k0, k1, max(0, k0 - q0)
        k0 = k1


def _mask_diagonal(s, k0, q_first) -> None:
    """Hide future keys in a tile ``s`` of keys ``k0, ...`` (down) by queries ``q_first, ...``."""
    crossing = min(s.shape[1], k0 + s.shape[0] - 1 - q_first)  # later queries see every key
    if crossing > 0:
        _hide_future_keys(s[:, :crossing], k0, np.arange(q_first, q_first + crossing))


def _hide_future_keys(s, k0, queries) -> None:
    """Set ``s[j, i] = -inf`` where key ``k0 + j`` is in the future of query ``queries[i]``."""
    keys = np.arange(k0, k0 + s.shape[0])[:, None]  # (b, 1)
    np.copyto(s, -np.inf, where=keys > queries)  # (b, w)


class _Scratch:
    """One worker's buffers, allocated once and reused for every tile it computes.

    Views are cut from flat arrays so that every view is contiguous, whatever
    the size of the last (ragged) block.
    """

    def __init__(self, block_q: int, block_k: int, d_k: int, d_v: int, dtype) -> None:
        self._queries = np.empty(block_q * (d_k + 1), dtype)
        self._keys = np.ones(block_k * (d_k + 1), dtype)  # the last column stays 1
        self._tile = np.empty(block_k * block_q, dtype)
        self._acc = np.empty((2, block_q * d_v), dtype)
        self._stats = np.empty((2, block_q), dtype)
        self._d_k, self._d_v = d_k, d_v

    def queries(self, bq: int) -> np.ndarray:
        return self._queries[: bq * (self._d_k + 1)].reshape(bq, self._d_k + 1)

    def keys(self, b: int) -> np.ndarray:
        return self._keys[: b * (self._d_k + 1)].reshape(b, self._d_k + 1)

    def tile(self, b: int, bq: int) -> np.ndarray:
        return self._tile[: b * bq].reshape(b, bq)

    def running(self, bq: int) -> _Running:
        acc, part = (a[: bq * self._d_v].reshape(bq, self._d_v) for a in self._acc)
        total, col_sum = (row[None, :bq] for row in self._stats)  # each (1, bq)
        return _Running(self.queries(bq), total, acc, col_sum, part)


def choose_blocks(m: int, n: int, dtype, block_q=None, block_k=None) -> tuple[int, int]:
    """Tile sizes ``(block_q, block_k)``: a score tile of about :data:`TILE_BYTES`.

    An explicit ``block_k`` (the lesson's ``block_size``) is kept; ``block_q``
    then fills the rest of the tile. Neither exceeds the problem.
    """
    itemsize = np.dtype(dtype).itemsize
    if block_k is None:
        block_k = 1 << (math.isqrt(TILE_BYTES // itemsize).bit_length() - 1)  # 512 for float32
    if block_q is None:
        block_q = max(16, min(MAX_BLOCK_Q, TILE_BYTES // (block_k * itemsize)))
    return min(block_q, m), min(block_k, n)


def _query_block_tasks(batch, m, block_q, causal) -> list[tuple[tuple[int, ...], int]]:
    """Every ``(batch index, first query)`` of the grid, the most work first.

    Under ``causal`` a late query block sees more keys than an early one; handing
    out the big ones first keeps the threads finishing together.
    """
    starts = range(0, m, block_q)
    if causal:
        starts = reversed(starts)
    return [(b, q0) for q0 in starts for b in np.ndindex(*batch)]


def _run_tasks(
    tasks: Iterable, run: Callable, make_scratch: Callable[[], _Scratch], workers: int
) -> None:
    """Call ``run(task, scratch)`` for every task, on ``workers`` threads.

    The threads come from a pool kept between calls; the calling thread waits
    for them (it holds the GIL less that way, so they start sooner). Each
    thread allocates its own scratch once and takes the next task until none is
    left. If one thread fails, the others stop taking tasks and the error is
    raised here.

    BLAS is limited to one thread meanwhile, also when ``workers`` is 1: the
    tiles are too small for BLAS's own threads to pay, and those threads would
    go on spinning (holding a core) for a while after each call.
    """
    pending = iter(tasks)
    lock = threading.Lock()
    failed = False

    def next_task():
        with lock:
            return None if failed else next(pending, None)

    def work() -> None:
        nonlocal failed
        scratch = make_scratch()
        try:
            while (task := next_task()) is not None:
                run(task, scratch)
        except BaseException:
            failed = True
            raise

    with _single_threaded_blas():
        if workers == 1:
            work()
            return
        pool = _thread_pool(workers)
        futures = [pool.submit(work) for _ in range(workers)]
        wait(futures)  # all of them, even if one fails early
    for future in futures:
        future.result()  # re-raises an exception from a worker


_pool: ThreadPoolExecutor | None = None
_pool_size, _pool_pid = 0, -1
_pool_lock = threading.Lock()


def _thread_pool(size: int) -> ThreadPoolExecutor:
    """At least ``size`` worker threads, kept from call to call.

    Threads that already exist start working at once, with their BLAS state
    warm. The pool is made again in a forked child, which inherits none of the
    parent's threads.
    """
    global _pool, _pool_size, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid() or _pool_size < size:
            if _pool is not None and _pool_pid == os.getpid():
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(size, thread_name_prefix="attnlib-chunked")
            _pool_size, _pool_pid = size, os.getpid()
        return _pool


def _blas_ready(X: np.ndarray, dtype) -> np.ndarray:
    """``X`` in ``dtype`` with rows BLAS can read in place (copied only if it must be)."""
    X = X.astype(dtype, copy=False)
    row, col = X.strides[-2:]
    if col != X.itemsize or row < X.shape[-1] * X.itemsize:
        X = np.ascontiguousarray(X)
    return X


_blas_controller = None


def _blas_libraries():
    """threadpoolctl's handle on the BLAS libraries loaded in this process (cached)."""
    global _blas_controller
    if _blas_controller is None:
        from threadpoolctl import ThreadpoolController

        _blas_controller = ThreadpoolController().select(user_api="blas")
    return _blas_controller


def _blas_threads() -> int:
    """How many threads NumPy's BLAS may use now (respects ``threadpool_limits``)."""
    counts = [lib.num_threads for lib in _blas_libraries().lib_controllers]
    if not counts:  # no BLAS found: fall back on the CPUs this process may use
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, max(counts))


def _single_threaded_blas():
    """A context in which BLAS calls use one thread (process-wide, restored on exit)."""
    libraries = _blas_libraries()
    return libraries.limit(limits=1) if libraries.lib_controllers else nullcontext()
