"""attnlib.numpy — the NumPy reference of everything the course teaches.

Readable, shape-checked and exact in float64. Shapes follow one convention:
queries ``(..., m, d_k)``, keys ``(..., n, d_k)``, values ``(..., n, d_v)``,
scores and weights ``(..., m, n)``, softmax over the last (key) axis, boolean
masks with True = may attend. Multi-head tensors are ``(B, h, T, d_head)``.
"""

from .attention import attention
from .backward import attention_backward, softmax_backward
from .chunked import chunked_attention
from .complexity import attention_flops, fit_exponent, score_matrix_bytes
from .decoding import cached_attention
from .hard import hard_attention, sampled_hard_attention
from .heads import merge_heads, multi_head_attention, split_heads
from .interpret import induction_score
from .masks import (
    causal_mask,
    from_additive_mask,
    from_key_padding_mask,
    padding_mask,
    to_additive_mask,
    to_key_padding_mask,
)
from .positional import sinusoidal_encoding
from .projections import cross_attention, self_attention
from .properties import check_attention
from .scoring import additive_scores, cosine_scores, dot_scores, scaled_dot_scores
from .softmax import masked_softmax, softmax

__all__ = [
    # 01-scoring
    "dot_scores",
    "scaled_dot_scores",
    "additive_scores",
    "cosine_scores",
    # 02-softmax-masking
    "softmax",
    "causal_mask",
    "padding_mask",
    "masked_softmax",
    "attention",
    "from_key_padding_mask",
    "to_key_padding_mask",
    "from_additive_mask",
    "to_additive_mask",
    # 03-self-cross
    "self_attention",
    "cross_attention",
    "hard_attention",
    "sampled_hard_attention",
    "sinusoidal_encoding",
    # 04-multi-head
    "split_heads",
    "merge_heads",
    "multi_head_attention",
    # 05-complexity
    "attention_flops",
    "score_matrix_bytes",
    "chunked_attention",
    "fit_exponent",
    # 06-build-and-train
    "softmax_backward",
    "attention_backward",
    "cached_attention",
    "induction_score",
    "check_attention",
]
