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
