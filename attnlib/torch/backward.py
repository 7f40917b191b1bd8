"""Lesson 06: backpropagation through softmax and attention, written out by hand.

The forward pass is ``S = Q Kᵀ / sqrt(d_k)``, ``P = masked_softmax(S)``, ``O = P V``; from an
upstream gradient ``dO``: ``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P ⊙ (dP − rowsum(dP ⊙ P))``,
``dQ = dS K / sqrt(d_k)``, ``dK = dSᵀ Q / sqrt(d_k)``. The results equal ``torch.autograd``'s,
and since they are built from differentiable operations, autograd can differentiate them again
(``gradcheck`` passes on them). Masked keys and fully masked rows get zero gradients.
"""

from __future__ import annotations

import torch

from attnlib._shapes import check_axis, check_grad_out, check_same_shape

from . import _validate
from .dot_product import _check_qkv
from .normalization import _softmax
from .scoring import _scale, _scaled_scores


def _softmax_backward(y: torch.Tensor, grad_y: torch.Tensor, dim: int) -> torch.Tensor:
    return y * (grad_y - (grad_y * y).sum(dim=dim, keepdim=True))  # (...)


def softmax_backward(y: torch.Tensor, grad_y: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Vector–Jacobian product of softmax, from its output.

    For ``y = softmax(x, axis)`` the gradient with respect to ``x`` is
    ``y * (grad_y − sum(grad_y * y, axis, keepdim=True))``; only ``y`` is needed. Entries with
    ``y = 0`` (masked keys, fully masked rows) get zero gradient.

    Args:
      y: softmax output ``(...)``, floating point.
      grad_y: upstream gradient ``∂L/∂y``, same shape, dtype and device.
      axis: the axis softmax normalised over (default the last).

    Returns:
      ``∂L/∂x``, the shape and dtype of ``y``.
    """
    _validate.floating(("y", y), ("grad_y", grad_y))
    check_axis("y", tuple(y.shape), axis)
    check_same_shape(("y", tuple(y.shape)), ("grad_y", tuple(grad_y.shape)))
    return _softmax_backward(y, grad_y, axis)  # (...)


def attention_backward(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    grad_out: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``attention(Q, K, V, mask)[0]`` with respect to ``Q``, ``K`` and ``V``.

    Args:
      Q: queries ``(..., m, d_k)``, floating point.
      K: keys ``(..., n, d_k)``, same dtype and device.
      V: values ``(..., n, d_v)``; batch axes of Q, K, V broadcast.
      grad_out: upstream gradient ``∂L/∂output`` ``(..., m, d_v)``, the shape of the output.
      mask: optional boolean mask broadcasting to the scores ``(..., m, n)``, True = may attend.

    Returns:
      ``(dQ (..., m, d_k), dK (..., n, d_k), dV (..., n, d_v))``, each the shape and dtype of
      its input (broadcast batch axes summed), equal to ``torch.autograd.grad(out, (Q, K, V),
      grad_out)``. A query with no allowed key contributes zero to all three.
    """
    scores_shape, out_shape = _check_qkv(Q, K, V)
    _validate.floating(("Q", Q), ("grad_out", grad_out))
    check_grad_out(tuple(grad_out.shape), out_shape)
    mask = _validate.mask(mask, scores_shape, ("Q", Q))
    dtype = _validate.compute_dtype(Q.dtype)  # 16-bit inputs are differentiated in float32
    q, k, v, g = (x.to(dtype) for x in (Q, K, V, grad_out))
    scale = _scale(Q.shape[-1], tuple(Q.shape))
    P = _softmax(_scaled_scores(q, k), mask=mask)  # (..., m, n), the forward pass again
    dV = P.transpose(-2, -1) @ g  # (..., n, d_v)
    dP = g @ v.transpose(-2, -1)  # (..., m, n)
    dS = _softmax_backward(P, dP, -1)  # (..., m, n), zero where P is
    dQ = (dS @ k) * scale  # (..., m, d_k)
    dK = (dS.transpose(-2, -1) @ q) * scale  # (..., n, d_k)
    return tuple(  # each summed over the batch axes its input was broadcast along
        grad.sum_to_size(x.shape).to(x.dtype) for grad, x in ((dQ, Q), (dK, K), (dV, V))
    )
