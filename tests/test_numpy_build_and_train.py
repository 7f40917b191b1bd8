"""attnlib.numpy, lesson 06: gradients by hand, decoding with a cache, induction heads, and the
property test of attention.

PyTorch is the oracle: ``torch.autograd`` for both backward functions (float64, errors below
1e-10), causal attention over the whole prefix for every step of a cached decoding loop.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SEEDS, normal, qkv_shapes, random_mask

import attnlib.numpy as an
from attnlib.checks import candidates
from attnlib.numpy.properties import PROPERTIES

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.lesson06

TOL = {"rtol": 1e-10, "atol": 1e-10}  # float64 against torch.autograd in float64
FAST = settings(max_examples=30, deadline=None)


def autograd(fn, inputs, grad_output):
    """``torch.autograd`` gradients of ``fn(*inputs)`` for ``grad_output``, as NumPy arrays."""
    tensors = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = fn(*tensors)
    grads = torch.autograd.grad(out, tensors, torch.from_numpy(grad_output), allow_unused=True)
    return [
        np.zeros(x.shape) if g is None else g.numpy() for g, x in zip(grads, inputs, strict=True)
    ]


def torch_attention(Q, K, V, mask=None):
    """Attention in torch, fully masked rows set to zero (torch.softmax would give NaN)."""
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        return torch.softmax(scores, dim=-1) @ V
    keep = torch.from_numpy(np.ascontiguousarray(mask))
    allowed = keep.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~(keep | ~allowed), -math.inf), dim=-1)
    return (weights * allowed) @ V


# ------------------------------------------------------------------------- softmax_backward


@FAST
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=SEEDS, data=st.data())
def test_softmax_backward_equals_autograd_along_any_axis(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x, g = normal(seed, tuple(shape), tuple(shape), scale=3)
    y = an.softmax(x, axis=axis)
    (expected,) = autograd(lambda t: torch.softmax(t, dim=axis), [x], g)
    got = an.softmax_backward(y, g, axis=axis)
    np.testing.assert_allclose(got, expected, **TOL)
    # softmax's output always sums to one, so its gradient sums to zero along the axis
    np.testing.assert_allclose(got.sum(axis=axis), 0.0, atol=1e-12)


def test_softmax_backward_is_zero_where_the_softmax_is_zero():
    scores = np.array([[0.5, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    y = an.masked_softmax(np.nan_to_num(scores, neginf=0.0), np.isfinite(scores))
    grad = an.softmax_backward(y, np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    assert grad[0, 1] == 0 and (grad[1] == 0).all()
    assert np.isfinite(grad).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_backward_keeps_the_dtype(dtype):
    y, g = (a.astype(dtype) for a in normal(0, (2, 3), (2, 3)))
    assert an.softmax_backward(an.softmax(y), g).dtype == dtype
    assert an.softmax_backward([[0.5, 0.5]], [[1, 2]]).dtype == np.float64  # integers: float64


# ----------------------------------------------------------------------- attention_backward


@FAST
@given(shapes=qkv_shapes(), seed=SEEDS, masked=st.booleans())
def test_attention_backward_equals_autograd(shapes, seed, masked):
    Q, K, V = normal(seed, *shapes, scale=2)
    out, _ = an.attention(Q, K, V)
    (grad_out,) = normal(seed + 1, out.shape)
    mask = random_mask(seed, out.shape[:-1] + (K.shape[-2],)) if masked else None
    expected = autograd(lambda q, k, v: torch_attention(q, k, v, mask), [Q, K, V], grad_out)
    got = an.attention_backward(Q, K, V, grad_out, mask)
    for mine, theirs, x in zip(got, expected, (Q, K, V), strict=True):
        assert mine.shape == x.shape
        np.testing.assert_allclose(mine, theirs, **TOL)


def test_attention_backward_sums_over_broadcast_batch_axes():
    Q, K, V = normal(1, (2, 1, 4, 3), (1, 3, 5, 3), (3, 5, 2))
    mask = random_mask(1, (2, 1, 1, 5))
    (grad_out,) = normal(2, (2, 3, 4, 2))
    expected = autograd(lambda q, k, v: torch_attention(q, k, v, mask), [Q, K, V], grad_out)
    got = an.attention_backward(Q, K, V, grad_out, mask)
    assert [g.shape for g in got] == [(2, 1, 4, 3), (1, 3, 5, 3), (3, 5, 2)]
    for mine, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(mine, theirs, **TOL)


def test_attention_backward_gives_zero_gradients_for_fully_masked_rows():
    Q, K, V, grad_out = normal(3, (2, 4, 3), (2, 5, 3), (2, 5, 2), (2, 4, 2))
    mask = np.ones((2, 4, 5), dtype=bool)
    mask[0, 1] = False  # query 1 of batch 0 sees nothing
    mask[1, :, 2] = False  # key 2 of batch 1 is hidden from everyone
    dQ, dK, dV = an.attention_backward(Q, K, V, grad_out, mask)
    assert np.isfinite(dQ).all() and np.isfinite(dK).all() and np.isfinite(dV).all()
    assert (dQ[0, 1] == 0).all()
    assert (dK[1, 2] == 0).all() and (dV[1, 2] == 0).all()
    # the fully masked query's upstream gradient reaches nothing
    bumped = grad_out.copy()
    bumped[0, 1] += 100.0
    for a, b in zip(an.attention_backward(Q, K, V, bumped, mask), (dQ, dK, dV), strict=True):
        np.testing.assert_array_equal(a, b)


def test_attention_backward_matches_finite_differences():
    Q, K, V, G = normal(4, (3, 4), (5, 4), (5, 2), (3, 2))

    def loss(Q, K, V):
        return float((an.attention(Q, K, V)[0] * G).sum())

    dQ, dK, dV = an.attention_backward(Q, K, V, G)
    eps = 1e-6
    for grad, which in ((dQ, 0), (dK, 1), (dV, 2)):
        args = [Q, K, V]
        for idx in np.ndindex(*args[which].shape):
            up, down = (a.copy() for a in (args[which], args[which]))
            up[idx] += eps
            down[idx] -= eps
            plus = loss(*[up if i == which else a for i, a in enumerate(args)])
            minus = loss(*[down if i == which else a for i, a in enumerate(args)])
            assert grad[idx] == pytest.approx((plus - minus) / (2 * eps), abs=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_backward_keeps_the_dtype(dtype):
    Q, K, V, G = (a.astype(dtype) for a in normal(5, (2, 3, 4), (2, 5, 4), (2, 5, 3), (2, 3, 3)))
    grads = an.attention_backward(Q, K, V, G, an.causal_mask(5)[:3])
    assert [g.dtype for g in grads] == [dtype] * 3
    if dtype == np.float32:
        exact = an.attention_backward(*(a.astype(np.float64) for a in (Q, K, V, G)))
        loose = an.attention_backward(Q, K, V, G)
        for a, b in zip(loose, exact, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------- cached_attention


@FAST
@given(
    seed=SEEDS,
    B=st.integers(1, 3),
    h=st.integers(1, 3),
    T=st.integers(1, 8),
    d=st.integers(1, 5),
    d_v=st.integers(1, 5),
)
def test_every_cached_step_equals_the_last_row_of_full_causal_attention(seed, B, h, T, d, d_v):
    Q, K, V = normal(seed, (B, h, T, d), (B, h, T, d), (B, h, T, d_v))
    cache = None
    for t in range(T):
        step = (Q[:, :, t : t + 1], K[:, :, t : t + 1], V[:, :, t : t + 1])
        out_t, cache = an.cached_attention(*step, cache)
        assert out_t.shape == (B, h, 1, d_v)
        assert cache[0].shape == (B, h, t + 1, d) and cache[1].shape == (B, h, t + 1, d_v)
        n = t + 1
        full, _ = an.attention(Q[:, :, :n], K[:, :, :n], V[:, :, :n], an.causal_mask(n))
        np.testing.assert_allclose(out_t, full[:, :, -1:], rtol=1e-12, atol=1e-12)
        with torch.no_grad():
            oracle = torch.nn.functional.scaled_dot_product_attention(
                *(torch.from_numpy(np.ascontiguousarray(a[:, :, :n])) for a in (Q, K, V)),
                is_causal=True,
            )
        np.testing.assert_allclose(out_t, oracle[:, :, -1:].numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(cache[0], K)
    np.testing.assert_array_equal(cache[1], V)


def test_cached_attention_keeps_float32_and_leaves_its_inputs_alone():
    q, k, v = (a.astype(np.float32) for a in normal(6, (1, 2, 1, 4), (1, 2, 1, 4), (1, 2, 1, 4)))
    cache = tuple(a.astype(np.float32) for a in normal(7, (1, 2, 3, 4), (1, 2, 3, 4)))
    before = [a.copy() for a in (q, k, v, *cache)]
    out, (K, V) = an.cached_attention(q, k, v, cache)
    assert out.dtype == K.dtype == V.dtype == np.float32
    for a, b in zip((q, k, v, *cache), before, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(K[:, :, -1:], k)


def test_an_empty_cache_is_the_same_as_none():
    q, k, v = normal(8, (2, 1, 1, 3), (2, 1, 1, 3), (2, 1, 1, 3))
    empty = (np.zeros((2, 1, 0, 3)), np.zeros((2, 1, 0, 3)))
    a, (K_a, _) = an.cached_attention(q, k, v)
    b, (K_b, _) = an.cached_attention(q, k, v, empty)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(K_a, K_b)
    np.testing.assert_allclose(a, v)  # one step: all the weight on itself


# -------------------------------------------------------------------------- induction_score


def repeated_sequence_weights(T: int, period: int, kind: str) -> np.ndarray:
    """Hand-made causal weights ``(T, T)`` of one head of a given kind."""
    w = np.zeros((T, T))
    for i in range(T):
        if kind == "induction" and i >= period:
            w[i, i - period + 1] = 1.0
        elif kind == "previous" and i >= 1:
            w[i, i - 1] = 1.0
        elif kind == "uniform" or i == 0:
            w[i, : i + 1] = 1.0 / (i + 1)
        else:
            w[i, i] = 1.0  # before the repeat: attend to itself
    return w


def test_induction_score_tells_the_kinds_of_head_apart():
    T, period = 16, 6
    heads = np.stack(
        [repeated_sequence_weights(T, period, k) for k in ("induction", "uniform", "previous")]
    )  # (3, T, T)
    scores = an.induction_score(heads, period)
    assert scores.shape == (3,)
    assert scores[0] == pytest.approx(1.0)
    harmonic = sum(1 / (i + 1) for i in range(period, T)) / (T - period)
    assert scores[1] == pytest.approx(harmonic)
    assert 1 / T < scores[1] < 2 * math.log(T / period) / (T - period)
    assert scores[2] == pytest.approx(0.0)


def test_induction_score_of_a_real_induction_pattern_and_of_batches():
    # tokens: a random first half, then the same again; an ideal induction head looks up the
    # previous occurrence of the current token and attends to the token after it
    period, T = 5, 12
    tokens = np.array([3, 1, 4, 0, 2] * 3)[:T]
    w = np.zeros((T, T))
    for i in range(T):
        earlier = [j for j in range(i) if tokens[j] == tokens[i]]
        w[i, earlier[-1] + 1 if earlier else i] = 1.0
    batch = np.stack([np.stack([w, np.eye(T)])] * 2)  # (B=2, h=2, T, T)
    scores = an.induction_score(batch, period)
    assert scores.shape == (2, 2)
    np.testing.assert_allclose(scores, [[1.0, 0.0], [1.0, 0.0]])


@FAST
@given(
    seed=SEEDS, lead=st.lists(st.integers(1, 3), max_size=2), T=st.integers(2, 9), data=st.data()
)
def test_induction_score_equals_a_loop(seed, lead, T, data):
    period = data.draw(st.integers(1, T - 1))
    (x,) = normal(seed, (*lead, T, T))
    w = an.masked_softmax(x, an.causal_mask(T))
    expected = np.mean([w[..., i, i - period + 1] for i in range(period, T)], axis=0)
    np.testing.assert_allclose(an.induction_score(w, period), expected, rtol=1e-12)
    assert an.induction_score(w.astype(np.float32), period).dtype == np.float32


# ------------------------------------------------------------------------- check_attention


# The candidates live in attnlib.checks.candidates: the grader judges learners' tests on them.
CORRECT, BUGS = candidates.CORRECT, candidates.BUGS


@pytest.mark.parametrize("name", list(CORRECT))
def test_check_attention_accepts_correct_attention_written_any_way(name):
    assert an.check_attention(CORRECT[name]) is None


@pytest.mark.parametrize("name", list(BUGS))
def test_check_attention_names_the_broken_property(name):
    bug, message = BUGS[name]
    with pytest.raises(AssertionError, match=message):
        an.check_attention(bug)


def test_every_property_has_a_bug_that_breaks_it():
    named = set()
    for bug, _ in BUGS.values():
        with pytest.raises(AssertionError) as info:
            an.check_attention(bug)
        named.add(str(info.value).split(":")[0])
    assert named == set(PROPERTIES)


def test_an_exception_in_the_tested_function_becomes_an_assertion_naming_the_property():
    def broken(Q, K, V, mask=None):
        raise RuntimeError("not written yet")

    with pytest.raises(AssertionError, match=r"^returns \(output, weights\): .*RuntimeError: not"):
        an.check_attention(broken)


def test_check_attention_neither_uses_nor_changes_the_global_random_state():
    # the legacy global generator is what a learner's notebook seeds
    np.random.seed(123)  # noqa: NPY002
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    an.check_attention(an.attention)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002
    for seed in (0, 1):  # the verdict does not depend on the caller's seed
        np.random.seed(seed)  # noqa: NPY002
        with pytest.raises(AssertionError, match="divided by d_k instead of sqrt"):
            an.check_attention(BUGS["scaled by d_k"][0])


def test_check_attention_does_not_let_the_tested_function_spoil_its_probes():
    def scales_in_place(Q, K, V, mask=None):
        out = an.attention(Q, K, V, mask)
        Q *= 100.0  # modifies its argument after use
        K[...] = 0.0
        return out

    an.check_attention(scales_in_place)


def test_check_attention_is_fast():
    start = time.perf_counter()
    an.check_attention(an.attention)
    assert time.perf_counter() - start < 0.5


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: an.softmax_backward(np.zeros((2, 5)), np.zeros((2, 4))),
            "y (2, 5) and grad_y (2, 4) must have the same shape",
        ),
        (
            lambda: an.softmax_backward(np.zeros((2, 5)), np.zeros((2, 5)), axis=2),
            "axis 2 is out of range for y (2, 5) (2 axes)",
        ),
        (
            lambda: an.attention_backward(
                np.zeros((2, 5, 8)), np.zeros((2, 7, 8)), np.zeros((2, 7, 3)), np.zeros((2, 5, 4))
            ),
            "grad_out (2, 5, 4) must have the shape of the output (2, 5, 3)",
        ),
        (
            lambda: an.attention_backward(
                np.zeros((2, 5, 8)), np.zeros((2, 7, 6)), np.zeros((2, 7, 3)), np.zeros((2, 5, 3))
            ),
            "Q (2, 5, 8) and K (2, 7, 6) disagree on d_k (8 vs 6)",
        ),
        (
            lambda: an.attention_backward(
                np.zeros((5, 8)),
                np.zeros((7, 8)),
                np.zeros((7, 3)),
                np.zeros((5, 3)),
                np.ones((7, 5), dtype=bool),
            ),
            "mask (7, 5) cannot broadcast to the scores (5, 7)",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((2, 3, 4, 8)), np.zeros((2, 3, 1, 8)), np.zeros((2, 3, 1, 8))
            ),
            "q_t (2, 3, 4, 8) holds 4 steps on axis -2; cached_attention takes one step",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((2, 3, 1, 8)), np.zeros((2, 4, 1, 8)), np.zeros((2, 4, 1, 8))
            ),
            "q_t (2, 3, 1, 8) and k_t (2, 4, 1, 8) disagree on (B, h, d) ((2, 3, 8) vs (2, 4, 8))",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                (np.zeros((2, 3, 5, 6)), np.zeros((2, 3, 5, 8))),
            ),
            "cache K (2, 3, 5, 6) and k_t (2, 3, 1, 8) disagree on (B, h, d)",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                (np.zeros((2, 3, 5, 8)), np.zeros((2, 3, 4, 8))),
            ),
            "cache K (2, 3, 5, 8) and V (2, 3, 4, 8) hold different numbers of steps (5 vs 4)",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 1, 8)),
                np.zeros((2, 3, 5, 8)),
            ),
            "cache must be None or a pair (K (B, h, t, d), V (B, h, t, d))",
        ),
        (
            lambda: an.cached_attention(
                np.zeros((3, 1, 8)), np.zeros((3, 1, 8)), np.zeros((3, 1, 8))
            ),
            "q_t (3, 1, 8) has 3 axes; expected 4: (B, h, 1, d)",
        ),
        (
            lambda: an.induction_score(np.zeros((2, 4, 5, 6)), 2),
            "weights (2, 4, 5, 6) must be square over its last two axes",
        ),
        (
            lambda: an.induction_score(np.zeros((2, 4, 6, 6)), 6),
            "period 6 leaves no query i >= period in weights (2, 4, 6, 6) (T = 6)",
        ),
        (
            lambda: an.induction_score(np.zeros((2, 4, 6, 6)), 0),
            "period must be a positive integer, got 0",
        ),
        (
            lambda: an.check_attention("attention"),
            "attention_fn must be a function attention_fn(Q, K, V, mask=None)",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_it(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
