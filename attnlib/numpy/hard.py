"""Hard attention: each query reads exactly one value (one-hot weights)."""

from __future__ import annotations

import numpy as np

from .._shapes import check_qkv
from ._validate import as_float, as_mask
from .scoring import scaled_dot_scores
from .softmax import masked_softmax


def _prepare(Q, K, V, mask):
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    scores_shape, _ = check_qkv(Q.shape, K.shape, V.shape)
    allowed = np.ones(scores_shape, dtype=bool)
    if mask is not None:
        allowed = np.broadcast_to(as_mask(mask, scores_shape), scores_shape)
    return Q, K, V, allowed


def _one_hot(index: np.ndarray, allowed: np.ndarray, dtype) -> np.ndarray:
    """One-hot rows at ``index`` ``(..., m)``; rows with no allowed key stay zero."""
    weights = np.zeros(allowed.shape, dtype=dtype)  # (..., m, n)
    np.put_along_axis(weights, index[..., None], 1, axis=-1)
    return weights * allowed.any(axis=-1, keepdims=True)


def hard_attention(Q, K, V, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Hard (argmax) attention: all weight on the best-scoring allowed key.

    Not differentiable: moving a query slightly either keeps the same key or
    jumps to another, so there is no gradient to learn from.

    Args:
      Q: queries ``(..., m, d_k)``; K: keys ``(..., n, d_k)``; V: values ``(..., n, d_v)``.
      mask: boolean, True = may attend, broadcastable to ``(..., m, n)``.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))``; weights are one-hot on the
      highest scaled score among allowed keys (the first on ties); a query with
      no allowed key gets zero weights and output.
    """
    Q, K, V, allowed = _prepare(Q, K, V, mask)
    scores = np.where(allowed, scaled_dot_scores(Q, K), -np.inf)  # (..., m, n)
    if scores.shape[-1] == 0:  # no keys at all: no query has one to pick
        return _no_keys(scores, V)
    best = np.argmax(scores, axis=-1)  # (..., m); argmax returns the first on ties
    weights = _one_hot(best, allowed, scores.dtype)  # (..., m, n)
    return weights @ V, weights


def _no_keys(scores: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero outputs ``(..., m, d_v)`` and empty weights ``(..., m, 0)``: the queries of a
    problem with no keys, each a query with no allowed key."""
    weights = np.zeros_like(scores)  # (..., m, 0)
    return weights @ V, weights


def sampled_hard_attention(Q, K, V, mask=None, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Stochastic hard attention: one key per query, drawn from the softmax weights.

    In expectation the output equals soft attention's; each draw reads one value.

    Args:
      Q, K, V, mask: as in :func:`hard_attention`.
      rng: a ``numpy.random.Generator``, or a seed for a new one.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))`` with one-hot weights.
    """
    Q, K, V, allowed = _prepare(Q, K, V, mask)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    probs = masked_softmax(scaled_dot_scores(Q, K), allowed)  # (..., m, n)
    if probs.shape[-1] == 0:
        return _no_keys(probs, V)
    cdf = np.cumsum(probs, axis=-1)  # (..., m, n)
    u = rng.random(probs.shape[:-1] + (1,)) * cdf[..., -1:]  # (..., m, 1)
    # The first key whose cumulative probability passes u; never a zero-weight key.
    index = np.argmax((cdf > u) & (probs > 0), axis=-1)  # (..., m)
    weights = _one_hot(index, allowed, probs.dtype)
    return weights @ V, weights
