"""Lesson 06: the property test of attention, for functions on tensors.

The probes and properties are those of :mod:`attnlib.numpy.properties` (rows sum to one over
keys, output = weights @ V, permutation equivariance, scaling by ``sqrt(d_k)``, masked keys,
no future leakage, fully masked rows, batch axes); here the probes become tensors on the
requested device and dtype, and what the function returns is copied back to plain float64
arrays before it is judged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from attnlib.numpy.properties import check_attention_with


def _to_array(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"a complex tensor ({x.dtype})")
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def check_attention(
    attention_fn: Callable,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> None:
    """Test that ``attention_fn`` behaves like :func:`attention`, property by property.

    ``attention_fn(Q, K, V, mask=None) -> (output, weights)`` is called on small fixed tensors
    and boolean masks (True = may attend); the mask is passed positionally and only when there
    is one. The properties, in the order they are checked: it returns ``(output, weights)`` of
    the right shapes; rows of the weights sum to one over keys; output = weights @ V;
    permutation equivariance over keys and queries; scores scaled by ``sqrt(d_k)``; masked keys
    get zero weight; no future leakage under a causal mask; fully masked rows give zeros, not
    NaN; batch dimensions broadcast independently. The inputs come from a fixed seed (the
    caller's random state is neither used nor changed); differences below ``rtol = 1e-3``,
    ``atol = 1e-4`` are ignored, so float32 arithmetic or SDPA pass.

    Args:
      attention_fn: the function to test, with the signature of :func:`attention`.
      device: where to put the inputs (default: the CPU).
      dtype: floating-point dtype of the inputs (default float64; float32 passes as well,
        16-bit floats are too coarse for the tolerance).

    Returns:
      None when every property holds. Raises ``AssertionError`` whose message starts with the
      name of the first property that fails; an exception raised by ``attention_fn`` becomes
      an ``AssertionError`` naming the property that was being checked.
    """
    if not callable(attention_fn):
        raise ValueError(
            f"attention_fn must be a function attention_fn(Q, K, V, mask=None) -> "
            f"(output, weights), got {type(attention_fn).__name__}"
        )
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    try:
        device = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a torch device ({err})") from None

    def to_input(a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)  # (...), a private copy made by the engine
        return t.to(device) if a.dtype == np.bool_ else t.to(device, dtype)

    check_attention_with(attention_fn, to_input, _to_array)
