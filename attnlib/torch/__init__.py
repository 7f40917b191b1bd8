"""``attnlib.torch``: the exercise contract on torch tensors.

Every function takes and returns tensors on any device (cuda, mps, cpu), is differentiable with
autograd where the mathematics is, and validates its inputs up front: bad shapes, dtypes, masks
or devices raise ``ValueError`` naming what is wrong. Masks are boolean with True = may attend;
use :func:`from_key_padding_mask` and :func:`from_additive_mask` for PyTorch's other conventions.

Modules, one per idea:

* ``scoring``        dot, scaled-dot, additive and cosine scores (lesson 01)
* ``normalization``  softmax and masked softmax (lesson 02)
* ``masks``          causal and padding masks, converters (lesson 02)
* ``dot_product``    scaled dot-product attention, explicit or via SDPA (lesson 02)
* ``projections``    self- and cross-attention (lesson 03)
* ``hard``           hard and sampled hard attention (lesson 03)
* ``positional``     sinusoidal positional encoding (lesson 03)
* ``heads``          split/merge heads, multi-head attention (lesson 04)
* ``modules``        the ``MultiHeadAttention`` nn.Module (lesson 04)
* ``complexity``     operation and memory counts, exponent fits (lesson 05)
* ``chunked``        block-wise attention with an online softmax (lesson 05)
* ``backward``       softmax and attention gradients by hand (lesson 06)
* ``causal``         the ``CausalSelfAttention`` nn.Module (lesson 06)
* ``decoding``       one decoding step with a key/value cache (lesson 06)
* ``interpret``      induction scores of attention heads (lesson 06)
* ``properties``     the property test ``check_attention`` (lesson 06)
* ``gpt``, ``train``  a tiny GPT with ablation switches, and its training loop (lesson 06;
  imported on their own: ``from attnlib.torch.gpt import GPT``)
* ``devices``        picking cuda, mps or cpu
"""

from .backward import attention_backward, softmax_backward
from .causal import CausalSelfAttention
from .chunked import chunked_attention
from .complexity import attention_flops, fit_exponent, score_matrix_bytes
from .decoding import cached_attention
from .devices import device
from .dot_product import attention
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
from .modules import MultiHeadAttention
from .normalization import masked_softmax, softmax
from .positional import sinusoidal_encoding
from .projections import cross_attention, self_attention
from .properties import check_attention
from .scoring import additive_scores, cosine_scores, dot_scores, scaled_dot_scores

__all__ = [
    # lesson 01: scoring
    "dot_scores",
    "scaled_dot_scores",
    "additive_scores",
    "cosine_scores",
    # lesson 02: softmax, masks, attention
    "softmax",
    "causal_mask",
    "padding_mask",
    "masked_softmax",
    "attention",
    "from_key_padding_mask",
    "to_key_padding_mask",
    "from_additive_mask",
    "to_additive_mask",
    # lesson 03: self/cross, hard attention, positions
    "self_attention",
    "cross_attention",
    "hard_attention",
    "sampled_hard_attention",
    "sinusoidal_encoding",
    # lesson 04: heads
    "split_heads",
    "merge_heads",
    "multi_head_attention",
    "MultiHeadAttention",
    # lesson 05: complexity
    "attention_flops",
    "score_matrix_bytes",
    "chunked_attention",
    "fit_exponent",
    # 06-build-and-train
    "softmax_backward",
    "attention_backward",
    "CausalSelfAttention",
    "cached_attention",
    "induction_score",
    "check_attention",
    # devices
    "device",
]
