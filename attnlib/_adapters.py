"""Driving a learner's ``nn.Module`` class with plain arrays, for the checks of lesson 06.

A check of a *class* cannot compare return values the way a check of a function does: it must
build the module, give it known weights, run it forward and backward, and read the numbers.
:func:`module_run` does exactly that, taking and returning only plain data (NumPy arrays, ints,
strings, dicts and lists), so the same code serves a learner's kernel (the checks call it
directly) and the grader (the sandbox calls it on the learner's class and sends the plain result
back; the verdict is reached outside). It judges nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np


def module_run(cls: type, spec: dict) -> dict:
    """Build ``cls(*spec["init"])``, load ``spec["state"]``, run it; plain results.

    ``spec`` keys: ``init`` (constructor arguments), ``state`` (parameter name → array; the
    module is cast to their dtype), ``x`` (input ``(B, T, d_model)``), ``grad_out`` (an upstream
    gradient for ``y``, or None), ``seed``, and ``train`` (how many training-mode forward passes
    to make, each after ``torch.manual_seed(seed + k)``).

    Returns ``{"y", "dx", "grads", "train", "weights", "params"}``: the eval-mode output, the
    gradients of the input and of every parameter (when ``grad_out`` is given), the
    training-mode outputs, the weights ``attention(ln1(x))`` returns if the module has such a
    method (else None), and the parameter names the module has.
    """
    import torch

    torch.manual_seed(int(spec.get("seed", 0)))
    module = cls(*spec.get("init", ()))
    params = sorted(name for name, _ in module.named_parameters())
    state = {name: torch.as_tensor(np.asarray(value)) for name, value in spec["state"].items()}
    if set(params) != set(state):
        return {"params": params}  # the check names what is missing or extra
    dtype = next(iter(state.values())).dtype
    module.to(dtype)
    module.load_state_dict(state, strict=False)
    x = torch.as_tensor(np.asarray(spec["x"])).to(dtype)
    out: dict = {"params": params, "train": [], "weights": None, "dx": None, "grads": {}}
    module.eval()
    x_in = x.clone().requires_grad_(spec.get("grad_out") is not None)
    y = _first(module(x_in))
    out["y"] = _plain(y)
    if spec.get("grad_out") is not None:
        y.backward(torch.as_tensor(np.asarray(spec["grad_out"])).to(y.dtype))
        out["dx"] = _plain(x_in.grad)
        out["grads"] = {
            name: _plain(p.grad) for name, p in module.named_parameters() if p.grad is not None
        }
    with torch.no_grad():
        attention = getattr(module, "attention", None)
        if callable(attention) and hasattr(module, "ln1"):
            out["weights"] = _plain(_second(attention(module.ln1(x))))
        module.train()
        for k in range(int(spec.get("train", 0))):
            torch.manual_seed(int(spec.get("seed", 0)) + 1 + k)
            out["train"].append(_plain(_first(module(x))))
    return out


def _first(value):
    return value[0] if isinstance(value, tuple | list) else value


def _second(value):
    return value[1] if isinstance(value, tuple | list) and len(value) > 1 else None


def _plain(value) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().to("cpu")
        value = value.float() if str(value.dtype) == "torch.bfloat16" else value
        return value.numpy().copy()
    return np.asarray(value)


ADAPTERS: dict[str, Callable[..., object]] = {"module_run": module_run}


def drive(fn: object, adapter: str, *args: object) -> object:
    """``ADAPTERS[adapter](fn, *args)`` — in the learner's kernel here, or, when ``fn`` is the
    grader's stand-in for the learner's object, in the sandbox (``__attn_adapted__``)."""
    remote = getattr(fn, "__attn_adapted__", None)
    if remote is not None:
        return remote(adapter, *args)
    return ADAPTERS[adapter](fn, *args)


# --- functions on NumPy arrays, called with tensors -------------------------------------------


def _tensor_among(args: tuple) -> object | None:
    """The first torch tensor among ``args``, or None (torch is never imported for this)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def like_arguments(args: tuple, result: object) -> object:
    """``result`` in the kind of arrays ``args`` came in.

    When ``args`` hold a torch tensor, every NumPy array in ``result`` (alone, or in a tuple or
    list) becomes a tensor on that tensor's device, floating-point ones in its dtype; otherwise
    ``result`` is returned as it is. A NumPy function called from PyTorch code (a stand-in, or
    a candidate handed to a learner's property test) answers in the caller's terms.
    """
    like = _tensor_among(args)
    if like is None:
        return result
    import torch

    def convert(value: object) -> object:
        if isinstance(value, tuple | list):
            return type(value)(convert(v) for v in value)
        if not isinstance(value, np.ndarray | np.generic):
            return value
        tensor = torch.as_tensor(np.array(value))  # a copy: the caller may write to it
        dtype = like.dtype if tensor.is_floating_point() and like.is_floating_point() else None
        return tensor.to(like.device, dtype)

    return convert(result)


def on_numpy(fn: Callable) -> Callable:
    """``fn`` (a function of NumPy arrays) taking torch tensors as well: they are read as
    arrays of their dtype (bfloat16 as float32), as the grader's protocol reads them, and the
    result comes back as tensors (:func:`like_arguments`)."""

    def wrapped(*args):
        if _tensor_among(args) is None:
            return fn(*args)
        plain = tuple(_plain(a) if hasattr(a, "detach") else a for a in args)
        return like_arguments(args, fn(*plain))

    wrapped.__name__ = wrapped.__qualname__ = getattr(fn, "__name__", "attention")
    wrapped.__doc__ = fn.__doc__
    return wrapped
