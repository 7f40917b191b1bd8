"""What attention costs: operation counts, bytes, and measured growth."""

from __future__ import annotations

import numpy as np

from .._shapes import check_nonneg_int


def attention_flops(m: int, n: int, d_k: int, d_v: int) -> int:
    """Floating-point operations of the two matrix products of one attention.

    ``Q Kᵀ`` is ``m·n`` dot products of length ``d_k`` (a multiply and an add
    each: ``2·m·n·d_k``); ``A V`` is ``2·m·n·d_v``. Softmax and scaling are
    ``O(m·n)`` and left out.
    """
    m, n = check_nonneg_int("m", m), check_nonneg_int("n", n)
    d_k, d_v = check_nonneg_int("d_k", d_k), check_nonneg_int("d_v", d_v)
    return 2 * m * n * d_k + 2 * m * n * d_v


def score_matrix_bytes(batch: int, heads: int, m: int, n: int, itemsize: int) -> int:
    """Bytes of the materialised score (or weight) matrix ``(batch, heads, m, n)``.

    ``itemsize`` is bytes per element: 4 for float32, 2 for float16/bfloat16.
    """
    sizes = {"batch": batch, "heads": heads, "m": m, "n": n, "itemsize": itemsize}
    total = 1
    for name, value in sizes.items():
        total *= check_nonneg_int(name, value)
    return total


def fit_exponent(ns, times) -> float:
    """Slope of the least-squares line of ``log(times)`` on ``log(ns)``.

    If ``time ≈ c · n^p`` then ``log time = log c + p log n``: the slope is
    the exponent ``p`` (≈ 2 for naive attention, ≈ 1 for a linear pass).

    Args:
      ns: problem sizes ``(k,)``, positive, at least two distinct.
      times: measurements ``(k,)``, positive.
    """
    ns = np.asarray(ns, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    if ns.ndim != 1 or ns.shape != times.shape:
        raise ValueError(
            f"ns {ns.shape} and times {times.shape} must be 1-D arrays of the same length"
        )
    if (ns <= 0).any() or (times <= 0).any() or not np.isfinite(ns).all():
        raise ValueError("ns and times must be positive: a log-log fit needs log(n) and log(t)")
    if not np.isfinite(times).all():
        raise ValueError("times must be finite")
    if np.unique(ns).size < 2:
        raise ValueError(f"ns {ns.tolist()} needs at least two distinct sizes to fit a slope")
    x, y = np.log(ns), np.log(times)
    x_c = x - x.mean()
    return float(np.sum(x_c * (y - y.mean())) / np.sum(x_c * x_c))
