"""The exercise contract of the design (shared/design.md), written down once for the tests.

Tests state it themselves rather than reading it from the code they test.
"""

CONTRACT = {
    "01-scoring": ("dot_scores", "scaled_dot_scores", "additive_scores", "cosine_scores"),
    "02-softmax-masking": ("softmax", "causal_mask", "padding_mask", "masked_softmax", "attention"),
    "03-self-cross": ("self_attention", "cross_attention", "hard_attention", "sinusoidal_encoding"),
    "04-multi-head": ("split_heads", "merge_heads", "multi_head_attention"),
    "05-complexity": ("attention_flops", "score_matrix_bytes", "chunked_attention", "fit_exponent"),
}
NAMES = tuple(name for names in CONTRACT.values() for name in names)

# Lesson 06-build-and-train's names: both backends have them (CausalSelfAttention: torch only).
LESSON06 = ("softmax_backward", "attention_backward", "cached_attention", "induction_score",
            "check_attention")  # fmt: skip
TORCH_ONLY = ("CausalSelfAttention",)

# What both backends add beyond the contract: mask converters and a sampled hard attention.
SHARED_EXTRAS = (
    "from_key_padding_mask",
    "to_key_padding_mask",
    "from_additive_mask",
    "to_additive_mask",
    "sampled_hard_attention",
)
