"""Scaled dot-product attention: scores → mask → softmax → weighted sum of values."""

from __future__ import annotations

import numpy as np

from .._shapes import check_qkv
from ._validate import as_float, as_mask
from .scoring import scaled_dot_scores
from .softmax import masked_softmax


def attention(Q, K, V, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention, ``softmax(Q Kᵀ / sqrt(d_k)) V``.

    Args:
      Q: queries ``(..., m, d_k)``.
      K: keys ``(..., n, d_k)``.
      V: values ``(..., n, d_v)``; leading axes of Q, K, V broadcast.
      mask: boolean, True = may attend, broadcastable to ``(..., m, n)``.

    Returns:
      ``(output (..., m, d_v), weights (..., m, n))``. Each row of ``weights``
      sums to 1 over the allowed keys; a query with no allowed key gets zero
      weights and a zero output.
    """
    Q, K, V = as_float("Q", Q), as_float("K", K), as_float("V", V)
    scores_shape, _ = check_qkv(Q.shape, K.shape, V.shape)
    if mask is not None:
        mask = as_mask(mask, scores_shape)
    scores = scaled_dot_scores(Q, K)  # (..., m, n)
    weights = masked_softmax(scores, mask)  # (..., m, n)
    return weights @ V, weights  # (..., m, d_v), (..., m, n)
