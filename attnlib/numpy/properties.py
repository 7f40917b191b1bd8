"""A property test for attention: does a function behave like :func:`attention`?

Rather than only comparing with a reference answer, :func:`check_attention` checks what every
correct attention must satisfy, one property at a time, and names the first one that fails:

1. it returns ``(output (..., m, d_v), weights (..., m, n))``;
2. the rows of the weights sum to one over the keys (not over the queries);
3. the output is ``weights @ V``;
4. it is permutation equivariant: reordering keys (with their values) or queries reorders the
   weights and outputs the same way;
5. the scores are scaled by ``sqrt(d_k)`` (not by ``d_k``, not unscaled);
6. masked keys get zero weight, and the allowed keys still sum to one;
7. under a causal mask nothing leaks from the future, neither into the weights nor the output;
8. a fully masked row gets zero weights and a zero output, not NaN;
9. batch dimensions broadcast independently (batch ≠ heads ≠ length), masks included.

The inputs are small and fixed (a private seeded generator, never the caller's random state),
so the whole test takes a few milliseconds. Differences below ``rtol = 1e-3``,
``atol = 1e-4`` are ignored, so float32 arithmetic, a fused kernel or masking with ``-1e9``
instead of ``-inf`` pass wherever they give the same answer.

:func:`check_attention_with` is the engine, shared with ``attnlib.torch.check_attention``: it
takes the conversions to and from the array type the function under test works with.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._shapes import check_qkv, fmt
from .softmax import masked_softmax

RTOL, ATOL = 1e-3, 1e-4  # loose enough for float32, tight enough for every bug below
LEAK = 1e-6  # a masked weight above this counts as attention to a masked key
SEED = 6

# Property names, the first words of every failure message.
RETURNS = "returns (output, weights)"
ROWS = "rows of the weights sum to one over keys"
OUTPUT = "output = weights @ V"
PERMUTATION = "permutation equivariance"
SCALE = "scaled by sqrt(d_k)"
MASKED = "masked keys get zero weight"
CAUSAL = "no future leakage under a causal mask"
EMPTY = "fully masked rows give zeros, not NaN"
BATCH = "batch dimensions broadcast independently"
PROPERTIES = (RETURNS, ROWS, OUTPUT, PERMUTATION, SCALE, MASKED, CAUSAL, EMPTY, BATCH)

BATCH_HINT = (
    "every batch (and head) entry is computed on its own: transpose only the last two axes "
    "of K (np.swapaxes(K, -1, -2) or K.transpose(-2, -1), not K.T) and multiply with @ "
    "(np.dot mixes batch axes)"
)

MASK_BROADCAST_HINT = (
    "a mask (B, 1, 1, n) broadcasts against the scores (B, h, m, n): batch entry b keeps its "
    "own keys, for every head and every query"
)

# Sizes all differ, so that confusing two axes changes a shape or a result.
M, N, D_K, D_V = 3, 5, 4, 2
T = 6  # causal probe
B, H, M_B, N_B, D_K_B, D_V_B = 2, 3, 4, 6, 5, 7  # batched probes

KEEP = np.array(
    [
        [True, False, True, True, False],
        [False, True, False, False, True],
        [True, True, True, False, True],
    ]
)  # (M, N): every query has an allowed and a masked key
ONE_ROW_EMPTY = np.array(
    [
        [True, True, False, False, True],
        [False, False, False, False, False],
        [False, True, False, True, False],
    ]
)  # (M, N): query 1 has no allowed key
LENGTHS = (N_B, 2)  # keys per batch entry in the batched padding probe


@dataclass(frozen=True)
class _Data:
    Q: np.ndarray  # (M, D_K)
    K: np.ndarray  # (N, D_K)
    V: np.ndarray  # (N, D_V)
    Qc: np.ndarray  # (T, D_K) causal probe
    Kc: np.ndarray  # (T, D_K)
    Vc: np.ndarray  # (T, D_V)
    Kf: np.ndarray  # (T, D_K) other keys for the future
    Vf: np.ndarray  # (T, D_V) other values for the future
    Qb: np.ndarray  # (B, H, M_B, D_K_B) batched probe
    Kb: np.ndarray  # (B, H, N_B, D_K_B)
    Vb: np.ndarray  # (B, H, N_B, D_V_B)


def _data() -> _Data:
    """The probe inputs, from a private generator (the caller's random state is untouched)."""
    rng = np.random.default_rng(SEED)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) * 1.5  # scores of order 1 after scaling

    return _Data(
        normal(M, D_K),
        normal(N, D_K),
        normal(N, D_V),
        normal(T, D_K),
        normal(T, D_K),
        normal(T, D_V),
        normal(T, D_K),
        normal(T, D_V),
        normal(B, H, M_B, D_K_B),
        normal(B, H, N_B, D_K_B),
        normal(B, H, N_B, D_V_B),
    )


def _softmax_of(Q: np.ndarray, K: np.ndarray, divisor: float, mask=None) -> np.ndarray:
    """``masked_softmax(Q Kᵀ / divisor, mask)`` in float64."""
    return masked_softmax(Q @ np.swapaxes(K, -1, -2) / divisor, mask)  # (..., m, n)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=ATOL))


def _worst(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """The largest absolute difference of two arrays and where it is."""
    diff = np.abs(np.nan_to_num(a - b, nan=np.inf))
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return float(diff[idx]), tuple(int(i) for i in idx)


def _at(idx: tuple[int, ...], axes: str) -> str:
    """``(1, 3)`` with axes ``"ij"`` → ``"i=1, j=3"``; ``axes`` names the leading axes first."""
    return ", ".join(f"{a}={i}" for a, i in zip(axes, idx, strict=False))


def _describe(Q, K, V, mask) -> str:
    text = f"Q {fmt(Q.shape)}, K {fmt(K.shape)}, V {fmt(V.shape)}"
    return text if mask is None else f"{text}, mask {fmt(mask.shape)}"


class _Runner:
    """Calls the function under test on copies of the inputs and reads back plain arrays."""

    def __init__(self, attention_fn, to_input, to_array) -> None:
        self.fn, self.to_input, self.to_array = attention_fn, to_input, to_array

    def __call__(
        self, prop: str, Q, K, V, mask=None, hint: str = ""
    ) -> tuple[np.ndarray, np.ndarray]:
        args = [self.to_input(np.array(x, copy=True)) for x in (Q, K, V)]
        if mask is not None:
            args.append(self.to_input(np.array(mask, copy=True)))
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")  # a correct answer may warn
                result = self.fn(*args)
        except Exception as err:
            raise AssertionError(
                f"{prop}: attention_fn raised {type(err).__name__}: {err} "
                f"on {_describe(Q, K, V, mask)}" + (f"; {hint}" if hint else "")
            ) from err
        if not isinstance(result, tuple | list) or len(result) != 2:
            raise AssertionError(
                f"{prop}: attention_fn must return a pair (output, weights), got "
                f"{type(result).__name__}"
                + (f" of {len(result)}" if isinstance(result, tuple | list) else "")
            )
        scores_shape, out_shape = check_qkv(Q.shape, K.shape, V.shape)
        hint = f"; {hint}" if hint else ""
        out = self._read(prop, "output", result[0], out_shape, f"(..., m, d_v){hint}")
        weights = self._read(prop, "weights", result[1], scores_shape, f"(..., m, n){hint}")
        return out, weights

    def _read(self, prop, what, x, shape, layout) -> np.ndarray:
        if x is None:
            raise AssertionError(
                f"{prop}: the {what} returned is None; attention_fn must return both the output "
                "and the weights"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = self.to_array(x)
                if np.iscomplexobj(raw):
                    raise TypeError("it holds complex numbers")
                a = np.asarray(raw, dtype=np.float64)
        except Exception as err:
            raise AssertionError(
                f"{prop}: the {what} returned is not an array of real numbers "
                f"({type(err).__name__}: {err})"
            ) from err
        if a.shape != tuple(shape):
            raise AssertionError(
                f"{prop}: the {what} {'have' if what == 'weights' else 'has'} shape "
                f"{fmt(a.shape)}, expected {fmt(shape)} = {layout}"
            )
        return a


# ------------------------------------------------------------------------------ the properties


def _returns(run: _Runner, d: _Data) -> tuple[np.ndarray, np.ndarray]:
    out, w = run(RETURNS, d.Q, d.K, d.V)
    if not (np.isfinite(out).all() and np.isfinite(w).all()):
        raise AssertionError(
            f"{RETURNS}: the output or weights contain NaN or inf on "
            f"{_describe(d.Q, d.K, d.V, None)}, without a mask"
        )
    return out, w


def _rows(w: np.ndarray) -> None:
    if (w < -ATOL).any():
        _, idx = _worst(np.minimum(w, 0), np.zeros_like(w))
        raise AssertionError(f"{ROWS}: weight {w[idx]:.3g} at ({_at(idx, 'ij')}) is negative")
    rows = w.sum(axis=-1)  # (m,)
    if not np.allclose(rows, 1.0, rtol=0, atol=ATOL):
        if np.allclose(w.sum(axis=-2), 1.0, rtol=0, atol=ATOL):
            raise AssertionError(
                f"{ROWS}: the weights sum to one over queries (axis -2), not over keys (the last "
                "axis); normalise every row, softmax(scores, axis=-1)"
            )
        _, (i,) = _worst(rows, np.ones_like(rows))
        raise AssertionError(f"{ROWS}: the weights of query i={i} sum to {rows[i]:.4g}, not 1")


def _output(out: np.ndarray, w: np.ndarray, V: np.ndarray, context: str = "") -> None:
    expected = w @ V  # (m, d_v)
    if not _close(out, expected):
        err, (i, c) = _worst(out, expected)
        raise AssertionError(
            f"{OUTPUT}: {context}the output differs from weights @ V by {err:.3g} at query "
            f"i={i}, column {c}; the output of query i is sum_j weights[i, j] * V[j]"
        )


def _permutation(run: _Runner, d: _Data, out: np.ndarray, w: np.ndarray) -> None:
    keys = np.array([3, 0, 4, 1, 2])  # a reordering of the N keys
    out_k, w_k = run(PERMUTATION, d.Q, d.K[keys], d.V[keys])
    if not (_close(out_k, out) and _close(w_k, w[:, keys])):
        raise AssertionError(
            f"{PERMUTATION}: reordering the keys together with their values must reorder the "
            "columns of the weights the same way and leave the output unchanged; attention "
            "must not depend on where a key stands"
        )
    queries = np.array([2, 0, 1])  # a reordering of the M queries
    out_q, w_q = run(PERMUTATION, d.Q[queries], d.K, d.V)
    if not (_close(out_q, out[queries]) and _close(w_q, w[queries])):
        raise AssertionError(
            f"{PERMUTATION}: reordering the queries must reorder the rows of the output and "
            "of the weights the same way; each query attends on its own"
        )


def _scale(d: _Data, w: np.ndarray) -> None:
    if _close(w, _softmax_of(d.Q, d.K, math.sqrt(D_K))):
        return
    for divisor, what in (
        (D_K, "divided by d_k instead of sqrt(d_k)"),
        (1.0, "not scaled; divide Q Kᵀ by sqrt(d_k)"),
        (1.0 / math.sqrt(D_K), "multiplied by sqrt(d_k) instead of divided by it"),
        (math.sqrt(D_V), "divided by sqrt(d_v) instead of sqrt(d_k) (d_k is Q.shape[-1])"),
        (math.sqrt(N), "divided by sqrt(n), the number of keys, instead of sqrt(d_k)"),
    ):
        if _close(w, _softmax_of(d.Q, d.K, divisor)):
            raise AssertionError(f"{SCALE}: the scores are {what}")
    err, idx = _worst(w, _softmax_of(d.Q, d.K, math.sqrt(D_K)))
    raise AssertionError(
        f"{SCALE}: the weights are not softmax(Q Kᵀ / sqrt(d_k)) over the keys; they differ by "
        f"{err:.3g} at ({_at(idx, 'ij')})"
    )


def _masked(run: _Runner, d: _Data) -> None:
    _, w = run(MASKED, d.Q, d.K, d.V, KEEP)
    if not np.isfinite(w).all():
        raise AssertionError(
            f"{MASKED}: the weights contain NaN or inf with a mask in which every query has an "
            "allowed key"
        )
    leaked = np.where(KEEP, 0.0, np.abs(w))  # (m, n)
    if leaked.max() > LEAK:
        _, (i, j) = _worst(leaked, np.zeros_like(leaked))
        why = ""
        if np.abs(np.where(KEEP, w, 0.0)).max() <= LEAK:
            why = "; the mask looks inverted: True means the key may be attended to"
        elif _close(w, _softmax_of(d.Q, d.K, math.sqrt(D_K))):
            why = "; the mask is ignored"
        raise AssertionError(
            f"{MASKED}: masked key j={j} receives weight {w[i, j]:.2g} from query i={i}{why}"
        )
    rows = w.sum(axis=-1)  # (m,)
    if not np.allclose(rows, 1.0, rtol=0, atol=ATOL):
        _, (i,) = _worst(rows, np.ones_like(rows))
        raise AssertionError(
            f"{ROWS}: with a mask, the weights of query i={i} sum to {rows[i]:.3g}, not 1; mask "
            "the scores before the softmax (masked scores -> -inf), not the weights after it"
        )
    expected = _softmax_of(d.Q, d.K, math.sqrt(D_K), KEEP)
    if not _close(w, expected):
        err, idx = _worst(w, expected)
        raise AssertionError(
            f"{MASKED}: the allowed keys' weights are not the softmax over the allowed keys "
            f"alone; they differ by {err:.3g} at ({_at(idx, 'ij')})"
        )


def _causal(run: _Runner, d: _Data) -> None:
    tril = np.tril(np.ones((T, T), dtype=bool))  # (T, T), key j <= query i
    out, w = run(CAUSAL, d.Qc, d.Kc, d.Vc, tril)
    future = np.where(tril, 0.0, np.abs(np.nan_to_num(w, nan=1.0)))  # (T, T)
    if future.max() > LEAK:
        _, (i, j) = _worst(future, np.zeros_like(future))
        raise AssertionError(
            f"{CAUSAL}: query i={i} gives weight {w[i, j]:.2g} to key j={j} in its future"
        )
    for t in (1, T // 2):  # keys and values from position t on are replaced
        K = np.concatenate([d.Kc[:t], d.Kf[t:]])  # (T, D_K)
        V = np.concatenate([d.Vc[:t], d.Vf[t:]])  # (T, D_V)
        changed, _ = run(CAUSAL, d.Qc, K, V, tril)
        if not _close(changed[:t], out[:t]):
            err, (i, _) = _worst(changed[:t], out[:t])
            raise AssertionError(
                f"{CAUSAL}: the output of query i={i} changes by {err:.3g} when the keys and "
                f"values from position {t} on (its future) change; compute the output from the "
                "masked weights"
            )


def _empty_row(run: _Runner, d: _Data) -> None:
    out, w = run(EMPTY, d.Q, d.K, d.V, ONE_ROW_EMPTY)
    i = 1  # the query with no allowed key
    fix = "give it all-zero weights and a zero output (divide only where a row's total is > 0)"
    for what, x in (("weights", w[i]), ("output", out[i])):
        if np.isnan(x).any():
            raise AssertionError(
                f"{EMPTY}: query i={i} has no allowed key and gets NaN {what}; {fix}"
            )
    if np.abs(w[i]).max() > LEAK:
        uniform = ""
        if abs(w[i].sum() - 1) < ATOL:
            uniform = " (uniform 1/n, what masking with -1e9 gives)"
        raise AssertionError(
            f"{EMPTY}: query i={i} has no allowed key but gets weights summing to "
            f"{w[i].sum():.3g}{uniform}; {fix}"
        )
    if np.abs(out[i]).max() > ATOL:
        raise AssertionError(
            f"{EMPTY}: query i={i} has no allowed key but a non-zero output; {fix}"
        )
    expected_w = _softmax_of(d.Q, d.K, math.sqrt(D_K), ONE_ROW_EMPTY)
    if not (_close(w, expected_w) and _close(out, expected_w @ d.V)):
        raise AssertionError(
            f"{EMPTY}: with one fully masked row the other queries must attend as before "
            "(softmax over their allowed keys, output = weights @ V)"
        )


def _batch(run: _Runner, d: _Data) -> None:
    Qb, Kb, Vb = d.Qb[:, 0], d.Kb[:, 0], d.Vb[:, 0]  # (B, M_B, D_K_B), ...: no head axis
    cases = [
        (Qb, Kb, Vb, None, BATCH_HINT),
        (d.Qb, d.Kb, d.Vb, None, BATCH_HINT),
        (d.Qb, d.Kb, d.Vb, _padding_mask(), MASK_BROADCAST_HINT),
    ]
    for Q, K, V, mask, hint in cases:
        out, w = run(BATCH, Q, K, V, mask, hint=hint)
        want_w = _softmax_of(Q, K, math.sqrt(Q.shape[-1]), mask)  # (..., m, n)
        want_out = want_w @ V  # (..., m, d_v)
        for idx in np.ndindex(*Q.shape[:-2]):
            if not (_close(w[idx], want_w[idx]) and _close(out[idx], want_out[idx])):
                masked = "" if mask is None else f" and mask {fmt(mask.shape)}"
                raise AssertionError(
                    f"{BATCH}: with Q {fmt(Q.shape)}, K {fmt(K.shape)}, V {fmt(V.shape)}"
                    f"{masked}, entry ({_at(idx, 'bh')}) differs from attention on that entry "
                    f"alone; {hint}"
                )


def _padding_mask() -> np.ndarray:
    keys = np.arange(N_B)  # (N_B,)
    return (keys < np.array(LENGTHS)[:, None])[:, None, None, :]  # (B, 1, 1, N_B)


# ---------------------------------------------------------------------------------- the test


def check_attention_with(
    attention_fn: Callable,
    to_input: Callable[[np.ndarray], object],
    to_array: Callable[[object], np.ndarray],
) -> None:
    """The engine of :func:`check_attention`, for functions on any kind of array.

    Args:
      attention_fn: called as ``attention_fn(Q, K, V)`` or ``attention_fn(Q, K, V, mask)``.
      to_input: turns a float64 or boolean NumPy array into what ``attention_fn`` takes.
      to_array: turns one of ``attention_fn``'s results into a NumPy array.

    Returns:
      None; raises ``AssertionError`` naming the first property that fails.
    """
    d = _data()
    run = _Runner(attention_fn, to_input, to_array)
    out, w = _returns(run, d)
    _rows(w)
    _output(out, w, d.V)
    _permutation(run, d, out, w)
    _scale(d, w)
    _masked(run, d)
    _causal(run, d)
    masked_out, masked_w = run(OUTPUT, d.Q, d.K, d.V, KEEP)
    _output(masked_out, masked_w, d.V, context="with a mask, ")
    _empty_row(run, d)
    _batch(run, d)


def check_attention(attention_fn: Callable) -> None:
    """Test that ``attention_fn`` behaves like :func:`attention`, property by property.

    ``attention_fn(Q, K, V, mask=None) -> (output, weights)`` is called on small fixed NumPy
    arrays (float64) and boolean masks (True = may attend); the mask is passed positionally
    and only when there is one. See the module docstring for the properties and their order.

    Args:
      attention_fn: the function to test, with the signature of :func:`attention`.

    Returns:
      None when every property holds. Raises ``AssertionError`` whose message starts with the
      name of the first property that fails (e.g. ``"scaled by sqrt(d_k): the scores are
      divided by d_k instead of sqrt(d_k)"``); an exception raised by ``attention_fn`` becomes
      an ``AssertionError`` naming the property that was being checked.
    """
    if not callable(attention_fn):
        raise ValueError(
            f"attention_fn must be a function attention_fn(Q, K, V, mask=None) -> "
            f"(output, weights), got {type(attention_fn).__name__}"
        )
    check_attention_with(attention_fn, lambda a: a, np.asarray)
