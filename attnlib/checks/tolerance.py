"""How close a result must be to the reference: one table, by the precision it was computed in.

A result is compared in the dtype the learner's function returned it in: the reference (always
computed in float64 from the exact inputs) is rounded to that dtype first, and the tolerance is
the table's entry for the *coarser* of that dtype and the probe's inputs. So float32 inputs or a
float32 result are judged with float32's tolerance, and a float64 answer to a float32 probe is
not held to more digits than its inputs carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """``|actual - expected| <= atol + rtol * |expected|``, element by element."""

    rtol: float
    atol: float


# The one table. float32 and float16 results of well-conditioned code stay well inside these;
# every classic mistake misses by far more (a factor of sqrt(d_k), a whole row, a sign).
TOLERANCES: dict[np.dtype, Tolerance] = {
    np.dtype(np.float64): Tolerance(rtol=1e-6, atol=1e-8),
    np.dtype(np.float32): Tolerance(rtol=1e-3, atol=1e-5),
    np.dtype(np.float16): Tolerance(rtol=1e-2, atol=1e-3),
}
EXACT_COUNT = Tolerance(rtol=0.0, atol=0.5)  # counts (FLOPs, bytes): right to the unit


def precision(dtype: np.dtype) -> np.dtype:
    """The table's row for ``dtype``: its own float type, float64 for everything else."""
    dtype = np.dtype(dtype)
    return dtype if dtype in TOLERANCES else np.dtype(np.float64)


def coarser(*dtypes: np.dtype | None) -> np.dtype:
    """The least precise of ``dtypes`` (``None`` entries ignored), as a row of the table."""
    rows = [precision(d) for d in dtypes if d is not None]
    return max(rows, key=lambda d: TOLERANCES[d].rtol, default=np.dtype(np.float64))


def tolerance(*dtypes: np.dtype | None) -> Tolerance:
    """The tolerance for a result compared in the coarsest of ``dtypes``."""
    return TOLERANCES[coarser(*dtypes)]


def input_dtype(values) -> np.dtype | None:
    """The coarsest floating-point dtype among ``values`` (arrays), or ``None`` if none is."""
    floats = [v.dtype for v in values if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    return coarser(*floats) if floats else None


def rounded(expected: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``expected`` as the learner's float dtype would hold it (other dtypes unchanged)."""
    if dtype.kind != "f" or dtype == expected.dtype:
        return expected
    with np.errstate(over="ignore"):
        return expected.astype(precision(dtype)).astype(np.float64)


def deviation(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> np.ndarray:
    """By how much each element misses the tolerance (> 0 misses; NaN where NaN is wrong)."""
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - e)
        err = np.where(a == e, 0.0, err)  # equal infinities match
        return err - (tol.atol + tol.rtol * np.abs(e))


def within(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> bool:
    """True when ``actual`` has ``expected``'s shape and every value is within ``tol``."""
    if actual.shape != expected.shape:
        return False
    miss = deviation(actual, expected, tol)
    return not bool(np.isnan(miss).any() or (miss > 0).any())


def alike(first: np.ndarray, second: np.ndarray, tol: Tolerance) -> bool:
    """True when two model outputs cannot be told apart within ``tol`` (NaN matching NaN)."""
    if first.shape != second.shape:
        return False
    both_nan = np.isnan(first) & np.isnan(second)
    miss = deviation(np.where(both_nan, 0.0, first), np.where(both_nan, 0.0, second), tol)
    return not bool(np.isnan(miss).any() or (miss > 0).any())
