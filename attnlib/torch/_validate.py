"""Checks on tensor type, dtype and device shared by the Torch backend.

Shape checks live in :mod:`attnlib._shapes` so the NumPy and Torch backends word them the same;
this module adds what only tensors have: a dtype, a device and a boolean mask convention.
Everything raises ``ValueError`` so a learner sees one kind of error for every bad input.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_mask, fmt

MASK_HINT = (
    "a mask must be a boolean tensor with True = may attend; convert an additive 0/-inf float "
    "mask with from_additive_mask(m) and a PyTorch key_padding_mask (True = ignore) with "
    "from_key_padding_mask(kpm)"
)


def tensor(name: str, x: object) -> torch.Tensor:
    """Return ``x`` if it is a tensor, else raise naming ``name`` and the type it has."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor, got {type(x).__module__}.{type(x).__qualname__}; "
            f"convert it with torch.as_tensor({name})"
        )
    return x


def floating(*named: tuple[str, object]) -> None:
    """Check that every ``(name, tensor)`` is floating point, of one dtype and on one device."""
    for name, x in named:
        tensor(name, x)
        if not x.is_floating_point():
            raise ValueError(
                f"{name} has dtype {x.dtype}; attention needs floating-point tensors "
                f"(e.g. {name}.float())"
            )
    first_name, first = named[0]
    for name, x in named[1:]:
        if x.dtype != first.dtype:
            raise ValueError(
                f"{first_name} has dtype {first.dtype} but {name} has dtype {x.dtype}; "
                f"cast them to one floating-point dtype (e.g. {name}.to({first_name}.dtype))"
            )
    same_device(*named)


def same_device(*named: tuple[str, torch.Tensor]) -> None:
    """Check that every ``(name, tensor)`` lives on the device of the first one."""
    first_name, first = named[0]
    for name, x in named[1:]:
        if x.device != first.device:
            raise ValueError(
                f"{first_name} is on {first.device} but {name} is on {x.device}; put all "
                f"tensors on one device (e.g. {name}.to({first_name}.device))"
            )


def mask(
    m: object,
    scores_shape: tuple[int, ...],
    ref: tuple[str, torch.Tensor],
    name: str = "mask",
) -> torch.Tensor | None:
    """Validate an optional boolean keep-mask against the scores ``(..., m, n)``.

    ``ref`` is a ``(name, tensor)`` whose device the mask must share.
    """
    if m is None:
        return None
    tensor(name, m)
    if m.dtype != torch.bool:
        raise ValueError(f"{name} {fmt(m.shape)} has dtype {m.dtype}; {MASK_HINT}")
    same_device(ref, (name, m))
    check_mask(tuple(m.shape), scores_shape, name)
    return m


def bool_tensor(name: str, x: object, hint: str) -> torch.Tensor:
    """Return ``x`` if it is a boolean tensor, else raise with ``hint``."""
    tensor(name, x)
    if x.dtype != torch.bool:
        raise ValueError(f"{name} {fmt(x.shape)} has dtype {x.dtype}; {hint}")
    return x


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to accumulate in: float32 for 16-bit (and smaller) floats, else ``dtype``."""
    if dtype.is_floating_point and torch.finfo(dtype).bits < 32:
        return torch.float32
    return dtype


def copyable_mha(mha: object, needs: str) -> None:
    """Raise ValueError unless ``mha`` is an ``nn.MultiheadAttention`` whose parameters a
    self-attention module can take over (``needs`` names that module in the message)."""
    from torch import nn

    if not isinstance(mha, nn.MultiheadAttention):
        raise ValueError(f"from_torch takes an nn.MultiheadAttention, got {type(mha)!r}")
    if not mha._qkv_same_embed_dim:
        raise ValueError(
            f"mha has kdim={mha.kdim}, vdim={mha.vdim} different from "
            f"embed_dim={mha.embed_dim}; {needs} needs kdim = vdim = embed_dim"
        )
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("mha uses add_bias_kv or add_zero_attn, which are not supported")
