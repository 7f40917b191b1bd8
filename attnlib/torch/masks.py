"""Lesson 02: boolean keep-masks (True = may attend) and converters from other conventions.

PyTorch has three mask conventions; ``attnlib`` uses one:

* ``attnlib`` and ``F.scaled_dot_product_attention`` boolean ``attn_mask``: True = may attend.
* ``nn.MultiheadAttention`` ``key_padding_mask`` ``(B, n)``: True = *ignore* this key.
* additive float masks: 0 where allowed, ``-inf`` (or a large negative number such as ``-1e9``)
  where not, added to the scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlib._shapes import check_nonneg_int, check_positive_int, fmt, require_exact_ndim

from . import _validate


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean causal mask: query ``i`` may attend to key ``j`` iff ``j <= i``.

    Args:
      T: sequence length (positive int).
      device: where to create the mask (default: torch's default device).

    Returns:
      bool ``(T, T)``, lower-triangular True.
    """
    T = check_positive_int("T", T)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T)


def padding_mask(
    lengths: Sequence[int] | torch.Tensor,
    max_len: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Keep-mask for right-padded sequences: key ``j`` of sequence ``b`` is real iff
    ``j < lengths[b]``.

    Args:
      lengths: ``(B,)`` integer lengths, each in ``[0, max_len]``; a list, tuple, NumPy array or
        integer tensor.
      max_len: padded length ``n`` (non-negative int).
      device: where to create the mask; defaults to the device of ``lengths`` if it is a tensor.

    Returns:
      bool ``(B, 1, max_len)``, which broadcasts against scores ``(B, m, max_len)``; for
      multi-head scores ``(B, h, m, n)`` add a head axis, ``mask[:, None]`` (or pass it to
      :func:`multi_head_attention`, which does).
    """
    max_len = check_nonneg_int("max_len", max_len)
    if isinstance(lengths, torch.Tensor):
        lengths_t = lengths
    else:
        try:
            lengths_t = torch.as_tensor(lengths)  # checked on the CPU, then moved
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(
                f"lengths must be a 1-D sequence of integers (B,), got {lengths!r} ({err})"
            ) from None
        if lengths_t.numel() == 0:
            lengths_t = lengths_t.long()  # torch.as_tensor([]) is float32
    integer = not (lengths_t.dtype == torch.bool or lengths_t.is_floating_point())
    if lengths_t.ndim != 1 or not integer or lengths_t.is_complex():
        raise ValueError(
            f"lengths {fmt(lengths_t.shape)} of dtype {lengths_t.dtype} must be a 1-D array of "
            "integers (B,)"
        )
    bad = (lengths_t < 0) | (lengths_t > max_len)  # (B,)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"lengths[{b}] = {int(lengths_t[b])} is outside [0, max_len] = [0, {max_len}]"
        )
    if device is not None:
        lengths_t = lengths_t.to(device)
    positions = torch.arange(max_len, device=lengths_t.device)  # (n,)
    keep = positions < lengths_t.unsqueeze(-1)  # (B, n)
    return keep.unsqueeze(-2)  # (B, 1, n)


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Convert a PyTorch ``key_padding_mask`` (True = ignore) into a keep-mask.

    Args:
      key_padding_mask: bool ``(B, n)``, True where the key is padding, as
        ``nn.MultiheadAttention`` takes it.

    Returns:
      bool ``(B, 1, n)``, True where the key may be attended to.
    """
    _validate.bool_tensor(
        "key_padding_mask",
        key_padding_mask,
        "from_key_padding_mask takes a boolean key_padding_mask (True = ignore); for an "
        "additive 0/-inf float mask use from_additive_mask(mask)[:, None, :]",
    )
    require_exact_ndim(
        "key_padding_mask", tuple(key_padding_mask.shape), 2, "(B, n), True = ignore"
    )
    return (~key_padding_mask).unsqueeze(-2)  # (B, 1, n)


def to_key_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert a per-key keep-mask back into a PyTorch ``key_padding_mask`` (True = ignore).

    Args:
      mask: bool ``(B, 1, n)``, True = may attend (as from :func:`padding_mask`).

    Returns:
      bool ``(B, n)``, True where the key is to be ignored.
    """
    _validate.bool_tensor("mask", mask, "a keep-mask is boolean with True = may attend")
    require_exact_ndim("mask", tuple(mask.shape), 3, "(B, 1, n), True = may attend")
    if mask.shape[1] != 1:
        raise ValueError(
            f"mask {fmt(mask.shape)} differs per query; a key_padding_mask can only express "
            "masks of shape (B, 1, n)"
        )
    return ~mask.squeeze(-2)  # (B, n)


def from_additive_mask(additive: torch.Tensor, threshold: float = -1e4) -> torch.Tensor:
    """Convert an additive float mask (0 = allowed, ``-inf`` = masked) into a keep-mask.

    Entries at or below ``threshold`` count as masked, so ``-1e9`` and ``torch.finfo(dtype).min``
    (used by some libraries instead of ``-inf``) work too. Any other non-zero value is a score
    bias, not a mask, and raises.

    Args:
      additive: floating-point tensor of any shape ``(...)``, each entry 0 or ``<= threshold``.
      threshold: the largest value that still counts as masked.

    Returns:
      bool tensor of the same shape and device, True where ``additive == 0``.
    """
    _validate.tensor("additive", additive)
    if not additive.is_floating_point():
        hint = (
            " (a boolean mask needs no conversion if True = may attend; if True = ignore, as "
            "nn.MultiheadAttention's attn_mask, use ~mask)"
            if additive.dtype == torch.bool
            else ""
        )
        raise ValueError(
            f"additive mask {fmt(additive.shape)} has dtype {additive.dtype}; from_additive_mask "
            f"takes a float mask of 0 and -inf{hint}"
        )
    keep = additive == 0
    neither = ~(keep | (additive <= threshold))
    if bool(neither.any()):
        idx = tuple(int(i) for i in neither.nonzero()[0])
        raise ValueError(
            f"additive mask {fmt(additive.shape)} has {float(additive[idx])} at {idx}: neither 0 "
            f"(keep) nor <= {threshold} (block); it biases scores and is not a boolean mask"
        )
    return keep


def to_additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Convert a keep-mask into an additive float mask: 0 where allowed, ``-inf`` where not.

    Args:
      mask: bool tensor of any shape ``(...)``, True = may attend.
      dtype: floating-point dtype of the result.

    Returns:
      ``dtype`` tensor of the shape of ``mask``, on its device.
    """
    _validate.bool_tensor("mask", mask, "to_additive_mask takes a boolean keep-mask")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))  # (...)
