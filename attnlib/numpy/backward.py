"""Backpropagation through softmax and attention, written out by hand.

The forward pass of attention is ``S = Q Kᵀ / sqrt(d_k)``, ``P = masked_softmax(S)``,
``O = P V``. Going backwards from an upstream gradient ``dO = ∂L/∂O``:

* ``dV = Pᵀ dO`` and ``dP = dO Vᵀ`` (the two products);
* ``dS = P ⊙ (dP − rowsum(dP ⊙ P))`` (softmax's vector–Jacobian product);
* ``dQ = dS K / sqrt(d_k)`` and ``dK = dSᵀ Q / sqrt(d_k)``.

A masked key has ``P = 0`` and so ``dS = 0``: no gradient flows through it, and a query with
no allowed key gets zero gradients. Batch axes that were broadcast in the forward pass are
summed in the backward pass, so each gradient has the shape of its input.
"""

from __future__ import annotations

import math

import numpy as np

from .._shapes import check_axis, check_d_k, check_grad_out, check_qkv, check_same_shape
from ._validate import as_float, as_mask
from .scoring import scaled_dot_scores
from .softmax import masked_softmax


def softmax_backward(y, grad_y, axis: int = -1) -> np.ndarray:
    """Vector–Jacobian product of softmax, from its output.

    For ``y = softmax(x, axis)`` the Jacobian along ``axis`` is ``diag(y) − y yᵀ``, so the
    gradient with respect to ``x`` is ``y * (grad_y − sum(grad_y * y, axis, keepdims=True))``.
    Only ``y`` is needed, not ``x``. Entries with ``y = 0`` (masked keys, fully masked rows)
    get zero gradient.

    Args:
      y: softmax output ``(...)``.
      grad_y: upstream gradient ``∂L/∂y``, the shape of ``y``.
      axis: the axis softmax normalised over (default the last).

    Returns:
      ``∂L/∂x``, the shape of ``y``.
    """
    y, grad_y = as_float("y", y), as_float("grad_y", grad_y)
    check_axis("y", y.shape, axis)
    check_same_shape(("y", y.shape), ("grad_y", grad_y.shape))
    return y * (grad_y - np.sum(grad_y * y, axis=axis, keepdims=True))  # (...)


def _sum_to_shape(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched, to get ``shape``."""
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and g.shape[i] != 1)
    if stretched:
        g = g.sum(axis=stretched, keepdims=True)
    return g


def attention_backward(Q, K, V, grad_out, mask=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``attention(Q, K, V, mask)[0]`` with respect to ``Q``, ``K`` and ``V``.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``; leading axes of Q, K, V broadcast.
      grad_out: upstream gradient ``∂L/∂output`` ``(..., m, d_v)``, the shape of the output.
      mask: boolean, True = may attend, broadcastable to ``(..., m, n)``.

    Returns:
      ``(dQ (..., m, d_k), dK (..., n, d_k), dV (..., n, d_v))``, each the shape of its input
      (broadcast batch axes summed). Equal to what ``torch.autograd`` computes; a query with no
      allowed key contributes zero to all three.
    """
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    grad_out = as_float("grad_out", grad_out)
    scores_shape, out_shape = check_qkv(Q.shape, K.shape, V.shape)
    check_d_k(Q.shape)
    check_grad_out(grad_out.shape, out_shape)
    if mask is not None:
        mask = as_mask(mask, scores_shape)
    scale = 1.0 / math.sqrt(Q.shape[-1])  # a Python float keeps float32 float32
    P = masked_softmax(scaled_dot_scores(Q, K), mask)  # (..., m, n), the forward pass again
    dV = np.swapaxes(P, -1, -2) @ grad_out  # (..., n, d_v)
    dP = grad_out @ np.swapaxes(V, -1, -2)  # (..., m, n)
    dS = softmax_backward(P, dP)  # (..., m, n), zero where P is
    dQ = (dS @ K) * scale  # (..., m, d_k)
    dK = (np.swapaxes(dS, -1, -2) @ Q) * scale  # (..., n, d_k)
    return _sum_to_shape(dQ, Q.shape), _sum_to_shape(dK, K.shape), _sum_to_shape(dV, V.shape)
