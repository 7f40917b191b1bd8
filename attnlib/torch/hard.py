"""Lesson 03: hard attention, where each query reads exactly one value.

:func:`hard_attention` picks the best-scoring allowed key (deterministic, no gradient through the
choice); :func:`sampled_hard_attention` draws the key from the softmax distribution, as in
stochastic hard attention. Both return one-hot weights, and zeros for a query with no allowed key.
"""

from __future__ import annotations

import torch

from . import _validate
from .dot_product import _check_qkv
from .normalization import _softmax
from .scoring import _scaled_scores


def _one_hot(index: torch.Tensor, like: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """One-hot rows ``(..., m, n)`` shaped like ``like`` at ``index (..., m, 1)``, zero where
    ``allowed (..., m, 1)`` is False."""
    hot = torch.zeros_like(like).scatter(-1, index, 1.0)  # (..., m, n)
    return torch.where(allowed, hot, torch.zeros_like(hot))  # (..., m, n)


def _prepare(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Validate; return scaled scores ``(..., m, n)``, the mask and ``allowed (..., m, 1)``."""
    scores_shape, _ = _check_qkv(Q, K, V)
    mask = _validate.mask(mask, scores_shape, ("Q", Q))
    with torch.no_grad():  # the choice of key is not differentiable
        scores = _scaled_scores(Q, K)  # (..., m, n)
    if mask is None:
        keep = torch.ones((), dtype=torch.bool, device=Q.device)
    else:
        keep = mask
    allowed = keep.expand(scores_shape).any(dim=-1, keepdim=True)  # (..., m, 1)
    return scores, mask, allowed


def hard_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard attention: each query copies the value of its highest-scoring allowed key.

    Scores are the scaled dot products ``Q Kᵀ / sqrt(d_k)``; on ties the first (lowest) key index
    wins. The weights carry no gradient; the output is differentiable with respect to ``V``.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``.
      mask: optional boolean mask broadcasting to ``(..., m, n)``, True = may attend.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))`` with one-hot weight rows; a query with no
      allowed key gets zero weights and a zero output.
    """
    scores, mask, allowed = _prepare(Q, K, V, mask)
    if scores.shape[-1] == 0:
        return _zeros(scores, V)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., m, n)
    best = scores.argmax(dim=-1, keepdim=True)  # (..., m, 1); first index on ties
    weights = _one_hot(best, scores, allowed)  # (..., m, n)
    return weights @ V, weights  # (..., m, d_v), (..., m, n)


def sampled_hard_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stochastic hard attention: each query copies one value drawn from the softmax weights.

    Key ``j`` is drawn for query ``i`` with probability ``masked_softmax(Q Kᵀ / sqrt(d_k))[i, j]``,
    so a masked key is never drawn.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``.
      mask: optional boolean mask broadcasting to ``(..., m, n)``, True = may attend.
      generator: optional ``torch.Generator`` on the device of ``Q`` for reproducible draws.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))`` with one-hot weight rows; a query with no
      allowed key gets zero weights and a zero output.
    """
    scores, mask, allowed = _prepare(Q, K, V, mask)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator)!r}")
        if generator.device != Q.device:
            raise ValueError(
                f"generator is on {generator.device} but Q is on {Q.device}; create it with "
                f"torch.Generator(device=Q.device)"
            )
    if scores.shape[-1] == 0:
        return _zeros(scores, V)
    n = scores.shape[-1]
    probs = _softmax(scores, dim=-1, mask=mask)  # (..., m, n)
    probs = probs.to(_validate.compute_dtype(probs.dtype))
    # torch.multinomial rejects all-zero rows: give fully masked rows a uniform row, zeroed below.
    probs = torch.where(allowed, probs, torch.ones((), dtype=probs.dtype, device=probs.device))
    flat = probs.reshape(-1, n)  # (rows, n)
    if flat.shape[0] == 0:
        return _zeros(scores, V)
    drawn = torch.multinomial(flat, 1, generator=generator)  # (rows, 1)
    index = drawn.reshape(*scores.shape[:-1], 1)  # (..., m, 1)
    weights = _one_hot(index, scores, allowed)  # (..., m, n)
    return weights @ V, weights  # (..., m, d_v), (..., m, n)


def _zeros(scores: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero weights ``(..., m, n)`` and their (zero) output for degenerate shapes."""
    weights = torch.zeros_like(scores)  # (..., m, n)
    return weights @ V, weights  # (..., m, d_v), (..., m, n)
