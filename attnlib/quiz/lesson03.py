"""Mastery check of lesson 03-self-cross: cross-attention shapes and sources, permutation
equivariance, hard attention, sinusoidal positions.

Every checker works out the right answer itself, with :mod:`attnlib.numpy` where it can, and
accepts the reasonable forms of it (a tuple, list or ``torch.Size`` for a shape; ``True`` or
"yes" for a yes/no question; "b", "B" or "(b)" for a letter; a Python, NumPy or 0-d array number).
"""

from __future__ import annotations

import numpy as np

from .. import numpy as ref
from . import Question
from .answers import as_bool, as_letter, as_number, as_shape

LESSON = "03-self-cross"


def _topic(section: str) -> str:
    return f"{LESSON}, '{section}'"


# The seeds' translation example: batch, source length, target length, model width.
B, L_SRC, L_TGT, D_MODEL = 2, 4, 3, 8
# The positional-encoding question: PE[P, 1] for a width of D_PE.
P, D_PE = 3, 16

# Where queries, keys and values come from, per option of question q2.
CROSS_SOURCES = {
    "a": ("decoder", "decoder", "decoder"),
    "b": ("decoder", "encoder", "encoder"),
    "c": ("encoder", "decoder", "decoder"),
    "d": ("decoder", "decoder", "encoder"),
}

# Why hard attention cannot be trained by backpropagation alone: (option, text, is the reason).
HARD_REASONS = (
    (
        "a",
        "an argmax over n keys costs O(n²) operations, too many to backpropagate through for "
        "long sequences",
        False,
    ),
    (
        "b",
        "its one-hot weights are piecewise constant in the scores, so their gradient is zero "
        "wherever it exists and no signal reaches the queries or the keys",
        True,
    ),
    (
        "c",
        "it cannot be combined with a causal or a padding mask, so training would leak future "
        "or padded tokens",
        False,
    ),
    (
        "d",
        "its weights do not sum to one over the keys, so its output is not a weighted average "
        "of the values",
        False,
    ),
)


def cross_score_shape() -> tuple[int, ...]:
    """Shape of the cross-attention weights in the seeds' example: ``(B, L_tgt, L_src)``."""
    Y = np.zeros((B, L_TGT, D_MODEL))  # (B, L_tgt, d_model) decoder states
    H = np.zeros((B, L_SRC, D_MODEL))  # (B, L_src, d_model) encoder outputs
    W = np.eye(D_MODEL)  # (d_model, d_model)
    _, weights = ref.cross_attention(Y, H, W, W, W)  # (B, L_tgt, L_src)
    return weights.shape


def cross_sources_option() -> str:
    """The option of ``CROSS_SOURCES`` that reproduces :func:`attnlib.numpy.cross_attention`."""
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((3, 5))  # (m, d) decoder
    H = rng.standard_normal((4, 5))  # (n, d) encoder
    W_q, W_k, W_v = rng.standard_normal((3, 5, 5))  # (d, d) each
    want, _ = ref.cross_attention(Y, H, W_q, W_k, W_v)  # (m, d)
    states = {"decoder": Y, "encoder": H}
    for option, (q, k, v) in CROSS_SOURCES.items():
        try:
            got, _ = ref.attention(states[q] @ W_q, states[k] @ W_k, states[v] @ W_v)
        except ValueError:  # keys and values of different lengths
            continue
        if got.shape == want.shape and np.allclose(got, want):
            return option
    raise AssertionError("no option reproduces cross_attention")  # pragma: no cover


def self_attention_is_equivariant() -> bool:
    """Whether permuting the tokens permutes self-attention's outputs the same way."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 4))  # (T, d_model)
    W_q, W_k, W_v = rng.standard_normal((3, 4, 4))  # (d_model, d) each
    perm = rng.permutation(6)
    out, _ = ref.self_attention(X, W_q, W_k, W_v)  # (T, d_v)
    out_perm, _ = ref.self_attention(X[perm], W_q, W_k, W_v)  # (T, d_v)
    return bool(np.allclose(out_perm, out[perm]))


def hard_reason_option() -> str:
    """The option of ``HARD_REASONS`` that explains it."""
    (option,) = [letter for letter, _, right in HARD_REASONS if right]
    return option


def pe_value() -> float:
    """``PE[P, 1]`` for width ``D_PE``."""
    return float(ref.sinusoidal_encoding(P + 1, D_PE)[P, 1])


def _options(pairs) -> str:
    return "; ".join(f"({letter}) {text}" for letter, text in pairs)


_CROSS_TEXT = {
    source: f"queries from the {source[0]}, keys from the {source[1]}, values from the {source[2]}"
    for source in CROSS_SOURCES.values()
}

QUESTIONS = (
    Question(
        key="q1",
        prompt=(
            f"An encoder reads a batch of B={B} source sentences of L_src={L_SRC} tokens; the "
            f"decoder holds L_tgt={L_TGT} target tokens; d_model={D_MODEL}. What is the shape "
            "of the score matrix S of the decoder's cross-attention? (a tuple)"
        ),
        topic=_topic("Cross-attention: the decoder reads the encoder"),
        check=lambda answer: as_shape(answer) == cross_score_shape(),
    ),
    Question(
        key="q2",
        prompt=(
            "In the decoder's cross-attention, where do the queries, keys and values come from? "
            + _options((k, _CROSS_TEXT[v]) for k, v in CROSS_SOURCES.items())
            + ". (a letter)"
        ),
        topic=_topic("Cross-attention: the decoder reads the encoder"),
        check=lambda answer: as_letter(answer, CROSS_SOURCES) == cross_sources_option(),
    ),
    Question(
        key="q3",
        prompt=(
            "Is self-attention without any positional information permutation-equivariant, "
            "i.e. does shuffling the input tokens shuffle the outputs in the same way? "
            "(True or False)"
        ),
        topic=_topic("Permutation equivariance"),
        check=lambda answer: (
            as_bool(answer) is not None and as_bool(answer) == self_attention_is_equivariant()
        ),
    ),
    Question(
        key="q4",
        prompt=(
            "Why can hard (argmax) attention not be trained by backpropagation directly? "
            + _options((letter, text) for letter, text, _ in HARD_REASONS)
            + ". (a letter)"
        ),
        topic=_topic("Hard versus soft attention"),
        check=lambda answer: (
            as_letter(answer, [o for o, _, _ in HARD_REASONS]) == hard_reason_option()
        ),
    ),
    Question(
        key="q5",
        prompt=(
            f"With d_model={D_PE}, what is PE[{P}, 1], column 1 of the sinusoidal encoding of "
            f"position {P} (positions count from 0)? (a number, within 1e-6)"
        ),
        topic=_topic("Giving attention a sense of order"),
        check=lambda answer: (
            (value := as_number(answer)) is not None and abs(value - pe_value()) <= 1e-6
        ),
    ),
)
