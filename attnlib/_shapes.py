"""Shape validation shared by the NumPy and Torch backends.

Every check works on plain shape tuples, so both backends raise the same
``ValueError`` with the same wording. Messages name the arguments, their
shapes and what was expected, e.g.::

    Q (2, 5, 8) and K (2, 7, 6) disagree on d_k (8 vs 6)
"""

from __future__ import annotations

from collections.abc import Sequence

Shape = tuple[int, ...]


def fmt(shape: Sequence[int]) -> str:
    """Render a shape the way NumPy prints it: ``(2, 5)``, ``(3,)``, ``()``."""
    return str(tuple(int(s) for s in shape))


def broadcast_shapes(*named: tuple[str, Sequence[int]]) -> Shape:
    """Broadcast shapes under NumPy rules, or raise naming every operand.

    ``named`` holds ``(name, shape)`` pairs. Returns the broadcast shape.
    """
    ndim = max((len(s) for _, s in named), default=0)
    out: list[int] = []
    for axis in range(-ndim, 0):
        size = 1
        for _, shape in named:
            if len(shape) >= -axis:
                dim = int(shape[axis])
                if dim == 1:
                    continue
                if size not in (1, dim):
                    parts = " and ".join(f"{n} {fmt(s)}" for n, s in named)
                    raise ValueError(
                        f"{parts} cannot be broadcast together: axis {axis} has sizes "
                        f"{sorted({int(s[axis]) for _, s in named if len(s) >= -axis})}"
                    )
                size = dim
        out.append(size)
    return tuple(out)


def broadcast_batch(*named: tuple[str, Sequence[int]], core: int = 2) -> Shape:
    """Broadcast the leading (batch) axes of shapes whose last ``core`` axes are their own.

    Raises naming the full shapes, e.g. ``Q (2, 5, 8) and K (3, 7, 8) have batch
    axes (2,) and (3,) that cannot broadcast``.
    """
    try:
        return broadcast_shapes(*((n, s[: len(s) - core]) for n, s in named))
    except ValueError:
        whole = " and ".join(f"{n} {fmt(s)}" for n, s in named)
        batches = " and ".join(fmt(s[: len(s) - core]) for _, s in named)
        raise ValueError(
            f"{whole} have batch axes {batches} that cannot broadcast (all but the last "
            f"{core} axes must be equal or 1)"
        ) from None


def require_ndim(name: str, shape: Sequence[int], min_ndim: int, layout: str) -> None:
    """Raise unless ``shape`` has at least ``min_ndim`` axes (``layout`` names them)."""
    if len(shape) < min_ndim:
        raise ValueError(
            f"{name} {fmt(shape)} has {len(shape)} axes; expected at least {min_ndim}: {layout}"
        )


def require_exact_ndim(name: str, shape: Sequence[int], ndim: int, layout: str) -> None:
    """Raise unless ``shape`` has exactly ``ndim`` axes (``layout`` names them)."""
    if len(shape) != ndim:
        raise ValueError(f"{name} {fmt(shape)} has {len(shape)} axes; expected {ndim}: {layout}")


def check_qk(q: Sequence[int], k: Sequence[int], qname: str = "Q", kname: str = "K") -> Shape:
    """Check queries ``(..., m, d_k)`` against keys ``(..., n, d_k)``.

    Returns the broadcast score shape ``(..., m, n)``.
    """
    require_ndim(qname, q, 2, "(..., m, d_k)")
    require_ndim(kname, k, 2, "(..., n, d_k)")
    if q[-1] != k[-1]:
        raise ValueError(
            f"{qname} {fmt(q)} and {kname} {fmt(k)} disagree on d_k ({q[-1]} vs {k[-1]})"
        )
    batch = broadcast_batch((qname, q), (kname, k))
    return (*batch, int(q[-2]), int(k[-2]))


def check_qkv(q: Sequence[int], k: Sequence[int], v: Sequence[int]) -> tuple[Shape, Shape]:
    """Check ``Q (..., m, d_k)``, ``K (..., n, d_k)``, ``V (..., n, d_v)``.

    Returns ``(scores_shape, output_shape)``: ``(..., m, n)`` and ``(..., m, d_v)``.
    """
    check_qk(q, k)
    require_ndim("V", v, 2, "(..., n, d_v)")
    if k[-2] != v[-2]:
        raise ValueError(
            f"K {fmt(k)} and V {fmt(v)} disagree on the number of keys n ({k[-2]} vs {v[-2]})"
        )
    batch = broadcast_batch(("Q", q), ("K", k), ("V", v))
    return (*batch, int(q[-2]), int(k[-2])), (*batch, int(q[-2]), int(v[-1]))


def check_mask(mask: Sequence[int], scores: Sequence[int], name: str = "mask") -> None:
    """Check that a mask broadcasts to the scores ``(..., m, n)`` without growing them."""
    try:
        out = broadcast_shapes((name, mask), ("scores", scores))
    except ValueError:
        out = None
    if out is None or tuple(out) != tuple(scores):
        raise ValueError(
            f"{name} {fmt(mask)} cannot broadcast to the scores {fmt(scores)} "
            f"(..., m, n); a mask must be (m, n), (..., 1, n) or (..., m, n)"
        )


def check_heads(name: str, width: int, num_heads: int) -> int:
    """Return ``width // num_heads`` or raise when the heads do not divide the width."""
    if not isinstance(num_heads, int) or isinstance(num_heads, bool) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    if width % num_heads:
        raise ValueError(
            f"{name} has {width} features, which {num_heads} heads cannot split evenly "
            f"({width} % {num_heads} = {width % num_heads})"
        )
    return width // num_heads


def check_weight(name: str, w: Sequence[int], rows: int, layout: str) -> None:
    """Check a right-multiplied projection ``W`` of shape ``(rows, cols)``."""
    require_exact_ndim(name, w, 2, layout)
    if w[0] != rows:
        raise ValueError(
            f"{name} {fmt(w)} expects inputs with {w[0]} features, but they have {rows}; "
            f"expected {layout}"
        )


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, *_integer_types())) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_nonneg_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is a non-negative integer, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, *_integer_types())) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _integer_types() -> tuple[type, ...]:
    import numpy as np

    return (np.integer,)


# --- 06-build-and-train: backward passes, decoding steps, induction heads -----------------

STEP = "(B, h, 1, d)"
CACHED = "(B, h, t, d)"


def check_axis(name: str, shape: Sequence[int], axis: object) -> int:
    """Return ``axis`` as an int if it indexes an axis of ``shape``, else raise."""
    if len(shape) == 0:
        raise ValueError(f"{name} () is a scalar; softmax_backward needs at least one axis")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        raise ValueError(
            f"axis {axis!r} is out of range for {name} {fmt(shape)} ({len(shape)} axes)"
        )
    return axis


def check_same_shape(a: tuple[str, Sequence[int]], b: tuple[str, Sequence[int]]) -> None:
    """Raise unless the two named shapes are equal."""
    (a_name, a_shape), (b_name, b_shape) = a, b
    if tuple(a_shape) != tuple(b_shape):
        raise ValueError(
            f"{a_name} {fmt(a_shape)} and {b_name} {fmt(b_shape)} must have the same shape"
        )


def check_grad_out(grad_out: Sequence[int], out: Sequence[int]) -> None:
    """Raise unless the upstream gradient has the shape of the attention output."""
    if tuple(grad_out) != tuple(out):
        raise ValueError(
            f"grad_out {fmt(grad_out)} must have the shape of the output {fmt(out)} "
            "(..., m, d_v) that it is the gradient of"
        )


def check_d_k(shape: Sequence[int]) -> None:
    """Raise when queries have no features (the scale ``1/sqrt(d_k)`` is undefined)."""
    if shape[-1] == 0:
        raise ValueError(f"Q {fmt(shape)} has d_k = 0; scaling by 1/sqrt(d_k) needs d_k >= 1")


def check_step(q: Sequence[int], k: Sequence[int], v: Sequence[int]) -> None:
    """Check one decoding step: ``q_t``, ``k_t``, ``v_t`` of shape ``(B, h, 1, d)``.

    ``q_t`` and ``k_t`` must have equal shapes; ``v_t`` shares their ``(B, h)`` and may have its
    own width ``d_v``.
    """
    for name, shape in (("q_t", q), ("k_t", k), ("v_t", v)):
        require_exact_ndim(name, shape, 4, STEP)
        if shape[-2] != 1:
            raise ValueError(
                f"{name} {fmt(shape)} holds {shape[-2]} steps on axis -2; cached_attention "
                f"takes one step: {STEP}"
            )
    if q[-1] == 0:
        raise ValueError(f"q_t {fmt(q)} has d = 0; scaling by 1/sqrt(d) needs d >= 1")
    if tuple(q) != tuple(k):
        raise ValueError(
            f"q_t {fmt(q)} and k_t {fmt(k)} disagree on (B, h, d) "
            f"({fmt((*q[:2], q[-1]))} vs {fmt((*k[:2], k[-1]))})"
        )
    if tuple(v[:2]) != tuple(k[:2]):
        raise ValueError(
            f"k_t {fmt(k)} and v_t {fmt(v)} disagree on (B, h) ({fmt(k[:2])} vs {fmt(v[:2])})"
        )


def check_cache_pair(cache: object) -> tuple[object, object]:
    """Return ``(K, V)`` if ``cache`` is a pair, else raise naming what it is."""
    if not isinstance(cache, tuple | list) or len(cache) != 2:
        what = (
            f"a {type(cache).__name__} of {len(cache)}"
            if isinstance(cache, tuple | list)
            else type(cache).__name__
        )
        raise ValueError(
            f"cache must be None or a pair (K {CACHED}, V {CACHED}) as cached_attention "
            f"returns it, got {what}"
        )
    return cache[0], cache[1]


def check_cache(K: Sequence[int], V: Sequence[int], k: Sequence[int], v: Sequence[int]) -> int:
    """Check a cache ``K (B, h, t, d_k)``, ``V (B, h, t, d_v)`` against the new step.

    Returns ``t``, the number of cached steps.
    """
    require_exact_ndim("cache K", K, 4, CACHED)
    require_exact_ndim("cache V", V, 4, CACHED)
    for name, cached, step_name, step in (("K", K, "k_t", k), ("V", V, "v_t", v)):
        if (*cached[:2], cached[-1]) != (*step[:2], step[-1]):
            raise ValueError(
                f"cache {name} {fmt(cached)} and {step_name} {fmt(step)} disagree on (B, h, d) "
                f"({fmt((*cached[:2], cached[-1]))} vs {fmt((*step[:2], step[-1]))})"
            )
    if K[-2] != V[-2]:
        raise ValueError(
            f"cache K {fmt(K)} and V {fmt(V)} hold different numbers of steps ({K[-2]} vs {V[-2]})"
        )
    return int(K[-2])


def check_induction(shape: Sequence[int], period: object) -> tuple[int, int]:
    """Check ``weights (..., h, T, T)`` and ``period``; return ``(T, period)``.

    ``period`` must leave at least one query ``i >= period``, i.e. ``1 <= period < T``.
    """
    require_ndim("weights", shape, 2, "(..., h, T, T)")
    if shape[-1] != shape[-2]:
        raise ValueError(
            f"weights {fmt(shape)} must be square over its last two axes (..., h, T, T): "
            f"queries and keys are the same sequence ({shape[-2]} vs {shape[-1]})"
        )
    period = check_positive_int("period", period)
    T = int(shape[-1])
    if period >= T:
        raise ValueError(
            f"period {period} leaves no query i >= period in weights {fmt(shape)} (T = {T}); "
            "the sequence must be longer than one period"
        )
    return T, period
