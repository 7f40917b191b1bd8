"""attnlib.numpy, lesson 04: splitting heads and multi-head attention."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, random_mask

import attnlib.numpy as an

pytestmark = pytest.mark.lesson04


@settings(max_examples=40, deadline=None)
@given(
    seed=SEEDS, B=st.integers(1, 3), T=st.integers(1, 6), h=st.integers(1, 4), d=st.integers(1, 5)
)
def test_split_then_merge_is_the_identity_and_head_i_owns_its_columns(seed, B, T, h, d):
    (X,) = normal(seed, (B, T, h * d))
    heads = an.split_heads(X, h)
    assert heads.shape == (B, h, T, d)
    for i in range(h):
        np.testing.assert_array_equal(heads[:, i], X[..., i * d : (i + 1) * d])
    np.testing.assert_array_equal(an.merge_heads(heads), X)


def loop_mha(X_q, X_kv, W_q, W_k, W_v, W_o, h, mask=None):
    """Multi-head attention written as a loop over heads, one column slice each."""
    d_head, d_v = W_q.shape[1] // h, W_v.shape[1] // h
    outs = []
    weights = []
    for i in range(h):
        q = X_q @ W_q[:, i * d_head : (i + 1) * d_head]
        k = X_kv @ W_k[:, i * d_head : (i + 1) * d_head]
        v = X_kv @ W_v[:, i * d_v : (i + 1) * d_v]
        o, w = an.attention(q, k, v, mask)
        outs.append(o)
        weights.append(w)
    return np.concatenate(outs, axis=-1) @ W_o, np.stack(weights, axis=1)


@settings(max_examples=30, deadline=None)
@given(
    seed=SEEDS,
    B=st.integers(1, 3),
    Tq=st.integers(1, 5),
    Tkv=st.integers(1, 5),
    h=st.integers(1, 4),
    d_head=st.integers(1, 4),
)
def test_multi_head_equals_a_loop_over_heads(seed, B, Tq, Tkv, h, d_head):
    d_model = 6
    X_q, X_kv, W_q, W_k, W_v, W_o = normal(
        seed,
        (B, Tq, d_model),
        (B, Tkv, d_model),
        (d_model, h * d_head),
        (d_model, h * d_head),
        (d_model, h * d_head),
        (h * d_head, d_model),
    )
    mask = random_mask(seed, (B, 1, Tkv))
    out, w = an.multi_head_attention(X_q, X_kv, W_q, W_k, W_v, W_o, h, mask)
    ref_out, ref_w = loop_mha(X_q, X_kv, W_q, W_k, W_v, W_o, h, mask)
    assert out.shape == (B, Tq, d_model) and w.shape == (B, h, Tq, Tkv)
    np.testing.assert_allclose(out, ref_out, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)


def test_padding_mask_does_not_leak_across_batch_when_batch_heads_and_length_differ():
    B, h, T, d = 2, 3, 4, 6
    X, W_q, W_k, W_v, W_o = normal(11, (B, T, d), (d, d), (d, d), (d, d), (d, d))
    mask = an.padding_mask([1, 3], T)  # (B, 1, T): no head axis, shared by all heads
    _, w = an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, h, mask)
    assert (w[0, :, :, 1:] == 0).all() and (w[1, :, :, 3:] == 0).all()
    assert (w[1, :, :, :3] > 0).all()


def test_a_per_head_mask_is_accepted():
    B, h, T, d = 2, 2, 3, 4
    X, W_q, W_k, W_v, W_o = normal(12, (B, T, d), (d, d), (d, d), (d, d), (d, d))
    mask = np.ones((B, h, T, T), dtype=bool)
    mask[:, 1] = an.causal_mask(T)
    _, w = an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, h, mask)
    assert (np.triu(w[:, 1], k=1) == 0).all()
    assert (w[:, 0] > 0).all()


def test_matches_torch_multihead_attention():
    torch = pytest.importorskip("torch")
    B, Tq, Tkv, d, h = 2, 3, 5, 8, 2
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(d, h, bias=False, batch_first=True).double()
    X_q, X_kv = normal(13, (B, Tq, d), (B, Tkv, d))
    kpm = np.array([[False] * 5, [False, False, True, True, True]])
    ref, ref_w = mha(
        torch.from_numpy(X_q),
        torch.from_numpy(X_kv),
        torch.from_numpy(X_kv),
        key_padding_mask=torch.from_numpy(kpm),
        average_attn_weights=False,
    )
    W = mha.in_proj_weight.detach().numpy()
    W_o = mha.out_proj.weight.detach().numpy().T
    out, w = an.multi_head_attention(
        X_q, X_kv, W[:d].T, W[d : 2 * d].T, W[2 * d :].T, W_o, h, an.from_key_padding_mask(kpm)
    )
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(w, ref_w.detach().numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.split_heads(np.zeros((2, 5, 10)), 3),
            r"X \(2, 5, 10\) has 10 features, which 3 heads cannot split evenly \(10 % 3 = 1\)",
        ),
        (lambda: an.split_heads(np.zeros((2, 5, 10)), 0), r"num_heads must be a positive int"),
        (lambda: an.merge_heads(np.zeros((5, 10))), r"X \(5, 10\) has 2 axes; expected at least 3"),
        (
            lambda: an.multi_head_attention(
                np.zeros((2, 3, 8)),
                np.zeros((2, 3, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                3,
            ),
            r"W_q \(8, 8\) has 8 features, which 3 heads cannot split evenly",
        ),
        (
            lambda: an.multi_head_attention(
                np.zeros((2, 3, 8)),
                np.zeros((3, 3, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                2,
            ),
            r"X_q \(2, 3, 8\) and X_kv \(3, 3, 8\) disagree on the batch size B \(2 vs 3\)",
        ),
        (
            lambda: an.multi_head_attention(
                np.zeros((2, 3, 8)),
                np.zeros((2, 3, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 4)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                2,
            ),
            r"W_q \(8, 8\) and W_k \(8, 4\) disagree on h\*d_head \(8 vs 4\)",
        ),
        (
            lambda: an.multi_head_attention(
                np.zeros((2, 3, 8)),
                np.zeros((2, 3, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((6, 8)),
                2,
            ),
            r"W_o \(6, 8\) expects inputs with 6 features, but they have 8",
        ),
        (
            lambda: an.multi_head_attention(
                np.zeros((2, 3, 8)),
                np.zeros((2, 3, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                np.zeros((8, 8)),
                2,
                np.ones((3, 2, 3, 3), dtype=bool),
            ),
            r"mask \(3, 2, 3, 3\) cannot broadcast to the scores \(2, 2, 3, 3\)",
        ),
    ],
)
def test_bad_input_names_the_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()
