"""Checks for lesson 06-build-and-train: backward passes, a module, a cache, heads, tests.

The learners write PyTorch here; the probes stay NumPy arrays (``torch.as_tensor`` takes them)
and results are read back with :func:`plain`, as everywhere. Three exercises are not plain
functions and are judged by an ``extra`` check instead:

* ``CausalSelfAttention`` and ``RepairedBlock`` are module classes: each is built, given known
  weights and run forward and backward by :func:`attnlib._adapters.module_run` (in the grader,
  inside the sandbox), and compared with the course's module — ``attnlib.torch``'s
  ``CausalSelfAttention`` and ``attnlib.torch.gpt.Block`` — in outputs, gradients and weights;
  a grading with secret problems builds modules of its own sizes and weights too
  (:attr:`._core.Exercise.drawn`);
* ``check_attention`` is a property test: it is run on every function of
  :mod:`.candidates` and must accept the right ones and catch most wrong ones.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np

from .. import numpy as ref
from .._adapters import drive, on_numpy
from ._core import Exercise, Mistake, Peak, Probe, plain
from .candidates import BUGS, CORRECT
from .probes import float32, label, normal, rng
from .tolerance import tolerance

LESSON = "06-build-and-train"


def _read(section: str) -> str:
    return f"{LESSON}, '{section}'"


# --- softmax_backward -----------------------------------------------------------------------


def _softmax_backward_probes() -> list[Probe]:
    out = []
    for seed, (shape, axis) in enumerate((((2, 3, 5), -1), ((4, 6), 0), ((2, 3, 5), 1))):
        x, g = normal(600 + seed, shape, shape, scale=2.0)
        y = ref.softmax(x, axis=axis)
        out.append(Probe((y, g), {"axis": axis}, label(y=y, grad_y=g) + f", axis={axis}"))
    y = np.array([[0.5, 0.25, 0.25, 0.0]])  # a masked key: weight 0, gradient 0
    g = np.array([[1.0, 0.0, 2.0, 5.0]])
    out.append(Probe((y, g), label="y = [[0.5, 0.25, 0.25, 0]], grad_y = [[1, 0, 2, 5]]"))
    out.append(float32(out[0]))
    return out


def _axis(probe: Probe) -> int:
    return probe.kwargs.get("axis", -1)


softmax_backward = Exercise(
    name="softmax_backward",
    lesson=LESSON,
    read=_read("The softmax's backward pass"),
    reference=ref.softmax_backward,
    probes=_softmax_backward_probes,
    outputs=("grad_x",),
    mistakes=(
        Mistake(
            "the − sum(grad_y · y) term is missing: y · grad_y is only the Jacobian's diagonal, "
            "and every weight also moves when another one does",
            lambda y, g, axis=-1: y * g,
        ),
        Mistake(
            "the sign is flipped: the vector–Jacobian product is y · (grad_y − sum(grad_y · y))",
            lambda y, g, axis=-1: y * ((g * y).sum(axis=axis, keepdims=True) - g),
        ),
        Mistake(
            lambda p: (
                f"the sum runs over the last axis, not over axis={_axis(p)}, the axis "
                "the softmax normalised"
            ),
            lambda y, g, axis=-1: y * (g - (g * y).sum(axis=-1, keepdims=True)),
            applies=lambda p: _axis(p) not in (-1, np.ndim(p.args[0]) - 1),
        ),
        Mistake(
            "the sum runs over every axis at once; it belongs to each slice along `axis`",
            lambda y, g, axis=-1: y * (g - (g * y).sum()),
        ),
        Mistake(
            "the sum is of grad_y alone; it must be weighted by the output: sum(grad_y · y)",
            lambda y, g, axis=-1: y * (g - g.sum(axis=axis, keepdims=True)),
        ),
    ),
)


# --- attention_backward ---------------------------------------------------------------------


def _attention_backward_probes() -> list[Probe]:
    out = []
    shapes = (((3, 4), (5, 4), (5, 2), (3, 2)), ((2, 3, 4), (2, 5, 4), (2, 5, 6), (2, 3, 6)))
    for seed, s in enumerate(shapes):
        Q, K, V, dO = normal(610 + seed, *s)
        out.append(Probe((Q, K, V, dO), label=label(Q=Q, K=K, V=V, grad_out=dO)))
    Q, K, V, dO = normal(620, (2, 3, 4), (1, 5, 4), (1, 5, 6), (2, 3, 6))  # K, V shared
    out.append(Probe((Q, K, V, dO), label=label(Q=Q, K=K, V=V, grad_out=dO) + " (K, V shared)"))
    Q, K, V, dO = normal(630, (3, 4), (5, 4), (5, 2), (3, 2))
    mask = np.array([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 1]], dtype=bool)
    out.append(Probe((Q, K, V, dO), {"mask": mask},
                     label(Q=Q, K=K, V=V, grad_out=dO) + ", mask (3, 5) with query 1 fully masked",
                     nan_hint="a fully masked query must give zero gradients, not NaN: its "
                              "weights are all zero, and so is everything that flows through "
                              "them"))  # fmt: skip
    out.append(float32(out[1]))
    return out


def _backward_with(scale: bool = True, softmax: bool = True, mask: bool = True, summed=True):
    """A model of attention_backward with one step left out."""

    def backward(Q, K, V, dO, mask_=None, **kwargs):
        mask_ = kwargs.get("mask", mask_)
        s = 1.0 / math.sqrt(Q.shape[-1])
        P = ref.masked_softmax(Q @ np.swapaxes(K, -1, -2) * s, mask_ if mask else None)
        dV = np.swapaxes(P, -1, -2) @ dO
        dP = dO @ np.swapaxes(V, -1, -2)
        dS = ref.softmax_backward(P, dP) if softmax else dP
        k = s if scale else 1.0
        dQ, dK = (dS @ K) * k, (np.swapaxes(dS, -1, -2) @ Q) * k
        if not summed:
            return dQ, dK, dV
        return _summed(dQ, Q.shape), _summed(dK, K.shape), _summed(dV, V.shape)

    return backward


def _broadcast(probe: Probe) -> bool:
    """Whether an input of ``attention_backward`` is shared across the others' batch axes."""
    Q, K, V, dO = (np.shape(a) for a in probe.args)
    batch = np.broadcast_shapes(Q[:-2], K[:-2], V[:-2], dO[:-2])
    return any(shape[:-2] != batch for shape in (Q, K, V))


def _summed(g: np.ndarray, shape: tuple) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


attention_backward = Exercise(
    name="attention_backward",
    lesson=LESSON,
    read=_read("The backward pass of attention"),
    reference=ref.attention_backward,
    probes=_attention_backward_probes,
    outputs=("dQ", "dK", "dV"),
    depends=("softmax_backward",),
    mistakes=(
        Mistake(
            "dQ and dK miss the 1/sqrt(d_k) factor: the scores were scaled on the way forward, "
            "so their gradient is scaled on the way back",
            _backward_with(scale=False),
        ),
        Mistake(
            "the softmax is skipped on the way back: dS must be softmax_backward(P, dP), not dP",
            _backward_with(softmax=False),
        ),
        Mistake(
            "the mask is ignored on the way back: masked keys have weight 0, so no gradient "
            "flows to them",
            _backward_with(mask=False),
            applies=lambda p: "mask" in p.kwargs,
        ),
        Mistake(
            "the gradients keep the batch axes their inputs were broadcast along: an input "
            "shared by every batch entry gets the sum of their gradients, summed over the batch "
            "axes to its own shape (sum_to_size in PyTorch, .sum(axis, keepdims=True) in NumPy)",
            _backward_with(summed=False),
            applies=_broadcast,
        ),
    ),
)


# --- cached_attention -----------------------------------------------------------------------


def _step_result(result: object) -> object:
    """``(out_t, (K', V'))`` → ``(out_t, K', V')``; anything else as it is."""
    if isinstance(result, tuple | list) and len(result) == 2:
        cache = result[1]
        if isinstance(cache, tuple | list) and len(cache) == 2:
            return (result[0], cache[0], cache[1])
    return result


def _cached_probes() -> list[Probe]:
    out = []
    for seed, (B, h, t, d, d_v) in enumerate(((2, 3, 4, 5, 5), (1, 2, 6, 4, 3))):
        q, k, v = normal(640 + seed, (B, h, 1, d), (B, h, 1, d), (B, h, 1, d_v))
        K, V = normal(650 + seed, (B, h, t, d), (B, h, t, d_v))
        out.append(Probe((q, k, v), {"cache": (K, V)},
                         label(q_t=q, k_t=k, v_t=v) + f", cache of {t} steps"))  # fmt: skip
    q, k, v = normal(660, (2, 3, 1, 4), (2, 3, 1, 4), (2, 3, 1, 4))
    out.append(Probe((q, k, v), {"cache": None}, label(q_t=q, k_t=k, v_t=v) + ", cache=None"))
    first = out[0]
    q, k, v = (a.astype(np.float32) for a in first.args)
    K, V = (a.astype(np.float32) for a in first.kwargs["cache"])
    out.append(Probe((q, k, v), {"cache": (K, V)}, first.label + ", all in float32"))
    return out


def _cached_with(append: bool = True, cache_used: bool = True, scale=math.sqrt, before=False):
    def joined(old, new):  # (B, h, t, d), (B, h, 1, d) -> (B, h, t+1, d)
        return np.concatenate([new, old] if before else [old, new], axis=-2)

    def step(q, k, v, cache=None):
        K = k if cache is None or not cache_used else joined(cache[0], k)
        V = v if cache is None or not cache_used else joined(cache[1], v)
        w = ref.softmax(q @ np.swapaxes(K, -1, -2) / scale(q.shape[-1]))
        out = w @ V
        if not append:  # attends correctly but hands back the old cache
            K, V = (k, v) if cache is None else cache
        return out, (K, V)

    return step


cached_attention = Exercise(
    name="cached_attention",
    lesson=LESSON,
    read=_read("Decoding fast: the KV cache"),
    reference=ref.cached_attention,
    probes=_cached_probes,
    outputs=("out_t", "K'", "V'"),
    flatten=_step_result,
    mistakes=(
        Mistake(
            "the cache is not updated: return (K', V') with this step's key and value appended "
            "along the time axis (-2)",
            _cached_with(append=False),
            applies=lambda p: p.kwargs.get("cache") is not None,
        ),
        Mistake(
            "the cache is ignored: the new query must attend to every cached key, not only its own",
            _cached_with(cache_used=False),
            applies=lambda p: p.kwargs.get("cache") is not None,
        ),
        Mistake(
            "scores scaled by d instead of sqrt(d)",
            _cached_with(scale=lambda d: d),
        ),
        Mistake(
            "this step's key and value go before the cached steps; append them at the end of "
            "the time axis (-2), so that K'[..., t, :] is step t",
            _cached_with(before=True),
            applies=lambda p: p.kwargs.get("cache") is not None,
        ),
    ),
)


# --- induction_score ------------------------------------------------------------------------


def _weights(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Causal attention weights of the given shape ``(..., T, T)``: rows over the prefix."""
    (x,) = normal(seed, shape, scale=2.0)
    T = shape[-1]
    return ref.masked_softmax(x, ref.causal_mask(T))


def _induction_probes() -> list[Probe]:
    out = []
    for seed, (shape, period) in enumerate((((3, 9, 9), 4), ((2, 4, 10, 10), 3), ((2, 6, 6), 1))):
        w = _weights(670 + seed, shape)
        out.append(Probe((w, period), label=label(weights=w) + f", period={period}"))
    out.append(float32(out[0]))
    return out


def _induction_with(offset: int = 1, start: int | None = None, mean: bool = True):
    def score(weights, period):
        T = weights.shape[-1]
        first = period if start is None else start
        queries = np.arange(max(first, period - offset), T)
        taken = weights[..., queries, queries - period + offset]
        return taken.mean(axis=-1) if mean else taken.sum(axis=-1)

    return score


induction_score = Exercise(
    name="induction_score",
    lesson=LESSON,
    read=_read("Induction heads"),
    reference=ref.induction_score,
    probes=_induction_probes,
    outputs=("score",),
    mistakes=(
        Mistake(
            "it measures attention to the earlier occurrence itself (key i − period); an "
            "induction head looks at the token after it (key i − period + 1)",
            _induction_with(offset=0),
        ),
        Mistake(
            "it sums over the queries; the score is their mean",
            _induction_with(mean=False),
        ),
        Mistake(
            "the mean starts at query period − 1, whose key i − period + 1 is token 0; it runs "
            "over the queries of the repeat, i >= period",
            _induction_with(start=0),
        ),
    ),
)


# --- CausalSelfAttention --------------------------------------------------------------------

MODULES = (  # (d_model, n_heads, B, T, dtype)
    (12, 3, 2, 5, np.float64),
    (16, 2, 3, 7, np.float64),
    (8, 1, 1, 4, np.float32),
)


def _causal_state(d: int, seed: int, dtype) -> dict[str, np.ndarray]:
    g = rng(seed)
    bound = 1 / math.sqrt(d)
    return {
        "qkv.weight": g.uniform(-bound, bound, (3 * d, d)).astype(dtype),
        "qkv.bias": g.uniform(-bound, bound, (3 * d,)).astype(dtype),
        "proj.weight": g.uniform(-bound, bound, (d, d)).astype(dtype),
        "proj.bias": g.uniform(-bound, bound, (d,)).astype(dtype),
    }


def _attend(state: dict, x, h: int, causal: bool = True, scale: str = "sqrt", axis: int = -1,
            merge: str = "transpose", split: str = "qkv", prefix: str = ""):  # fmt: skip
    """The course's causal self-attention on ``x (B, T, d)`` with the weights ``state``, and the
    classic ways to get it wrong (``causal``, ``scale``, ``axis``, ``merge``, ``split``)."""
    import torch

    t = {k.removeprefix(prefix): torch.as_tensor(v) for k, v in state.items()}
    x = torch.as_tensor(x)
    B, T, d = x.shape
    hd = d // h
    qkv = x @ t["qkv.weight"].T + t["qkv.bias"]  # (B, T, 3d)
    if split == "per_head":  # each head's q, k and v side by side
        q, k, v = qkv.view(B, T, h, 3 * hd).transpose(1, 2).split(hd, dim=-1)  # (B, h, T, hd)
    else:
        q, k, v = qkv.split(d, dim=-1)  # (B, T, d) each
        q, k = (k, q) if split == "kqv" else (q, k)
        q, k, v = (z.view(B, T, h, hd).transpose(1, 2) for z in (q, k, v))  # (B, h, T, hd)
    divisor = {"sqrt": math.sqrt(hd), "d": hd, "none": 1.0, "d_model": math.sqrt(d)}[scale]
    s = q @ k.transpose(-2, -1) / divisor  # (B, h, T, T)
    if causal:  # True: j <= i; "next": j <= i + 1 (tril with diagonal=1)
        keep = torch.ones(T, T, dtype=torch.bool).tril(1 if causal == "next" else 0)
        s = s.masked_fill(~keep, float("-inf"))
    w = torch.softmax(s, dim=axis)  # (B, h, T, T)
    y = w @ v  # (B, h, T, hd)
    y = y.transpose(1, 2).reshape(B, T, d) if merge == "transpose" else y.reshape(B, T, d)
    return (y @ t["proj.weight"].T + t["proj.bias"]).numpy(), w.numpy()


CAUSAL_MISTAKES = (
    ({"causal": False}, "there is no causal mask: position t attends to later positions"),
    ({"causal": "next"}, "the causal mask lets each position see the next one (tril with "
                         "diagonal=1): keep key j <= query i"),
    ({"scale": "d"}, "scores scaled by d_head instead of sqrt(d_head)"),
    ({"scale": "none"}, "scores are not scaled: divide by sqrt(d_head)"),
    ({"scale": "d_model"}, "scores scaled by sqrt(d_model) instead of sqrt(d_head)"),
    ({"axis": -2}, "the softmax runs over the queries (dim=-2), not the keys (dim=-1)"),
    ({"merge": "reshape"}, "the heads are merged by reshape without transposing (B, h, T, "
                           "d_head) back to (B, T, h, d_head) first"),
    ({"split": "kqv"}, "q and k are swapped: the output features of qkv are q, then k, then v"),
    ({"split": "per_head"}, "qkv is split per head (each head's q, k and v side by side); its "
                            "output features are all of q, then all of k, then all of v, and "
                            "head i takes columns i*d_head:(i+1)*d_head of each"),
)  # fmt: skip


def _module_verdict(fn, ran: dict, want: np.ndarray, model, state: dict, x, h: int,
                    mistakes, what: str) -> str | None:  # fmt: skip
    """Compare one run of the learner's module with the course's; the mistake if any."""
    if sorted(state) != ran.get("params"):
        extra = sorted(set(ran.get("params", [])) - set(state))
        missing = sorted(set(state) - set(ran.get("params", [])))
        return (f"{what} must have exactly the parameters {', '.join(sorted(state))}; "
                f"missing {missing or 'none'}, extra {extra or 'none'}")  # fmt: skip
    y = plain(ran.get("y"), "the output", dtype=None)
    if y.shape != want.shape:
        return f"the output has shape {y.shape}, expected (B, T, d_model) = {want.shape}"
    if y.dtype != want.dtype:
        return f"{want.dtype} inputs gave a {y.dtype} output: keep the input's dtype"
    tol = tolerance(want.dtype)
    if np.allclose(y, want, rtol=tol.rtol, atol=tol.atol):
        return None
    for size in range(1, len(mistakes) + 1):  # one mistake, then two at once, …
        for combination in itertools.combinations(mistakes, size):
            change = {k: v for c, _ in combination for k, v in c.items()}
            if len(change) < sum(len(c) for c, _ in combination):
                continue  # two mistakes of the same step cannot both be there
            buggy, _ = model(state, x, h, **change)
            if np.allclose(y, buggy, rtol=tol.rtol, atol=tol.atol):
                return "; and ".join(sentence for _, sentence in combination)
    worst = float(np.abs(y.astype(float) - want).max())
    return f"the output differs from the course's by up to {worst:.3g}"


def _drawn_module(seed: int) -> tuple[int, int, int, int, type]:
    """A module problem of a grading's own (:attr:`Exercise.drawn`), of the public ones' kind:
    ``(d_model, n_heads, B, T, dtype)`` drawn from ``seed``."""
    g = rng(seed)
    h, d_head, B, T = (int(g.integers(low, high)) for low, high in ((1, 5), (2, 9), (1, 4), (2, 9)))
    return h * d_head, h, B, T, (np.float64, np.float32)[int(g.integers(2))]


def _module_case(fn, shape: tuple, state: dict, x_seed: int, k: int, model, mistakes, what: str):
    """Build the learner's module of ``shape`` ``(d_model, n_heads, B, T, dtype)`` with the
    weights ``state``, run it forward and backward on inputs made from ``x_seed``, and compare
    it with ``model`` (the course's, and its ``mistakes``): (the mistake or None, what the
    module gave, the input, the upstream gradient, the course's attention weights)."""
    d, h, B, T, dtype = shape
    (x, g) = normal(x_seed, (B, T, d), (B, T, d))
    x, g = x.astype(dtype), g.astype(dtype)
    ran = drive(fn, "module_run", {"init": [d, h], "state": state, "x": x, "grad_out": g,
                                    "seed": k, "train": 0})  # fmt: skip
    want, weights = model(state, x, h)
    found = _module_verdict(fn, ran, want.astype(dtype), model, state, x, h, mistakes, what)
    return found, ran, x, g, weights


def _where(shape: tuple) -> str:
    """The problem a module was judged on, worded as every exercise words its probe ("… on x
    (2, 5, 12) float64, …"), so that a report counts one mistake made on any problem once."""
    d, h, B, T, dtype = shape
    return f" on x {(B, T, d)} {np.dtype(dtype).name}, d_model={d}, n_heads={h}"


def _causal_case(fn, shape: tuple, seed: int, x_seed: int, k: int) -> str | None:
    """The learner's module of ``shape`` on weights made from ``seed`` and inputs from
    ``x_seed``, against the course's; the mistake if any."""
    d, h, _, _, dtype = shape
    state = _causal_state(d, seed, dtype)
    found, ran, x, g, _ = _module_case(fn, shape, state, x_seed, k, _attend,
                                       CAUSAL_MISTAKES, "CausalSelfAttention")  # fmt: skip
    found = found or _gradients(ran, state, x, g, h, dtype)
    return found and found + _where(shape)


def _first(case, fn, problems) -> str | None:
    """The first mistake ``case(fn, shape, seed, x_seed, k)`` finds on ``problems``, if any."""
    return next((found for problem in problems if (found := case(fn, *problem))), None)


def _drawn_problems(seeds: tuple[int, ...], x_offset: int) -> list[tuple]:
    """A grading's own module problems (:attr:`Exercise.drawn`): one of each seed."""
    return [(_drawn_module(seed), seed, seed + x_offset, seed % 1000) for seed in seeds]


def _causal_module(fn, peak: Peak) -> str | None:
    public = [(shape, 700 + k, 710 + k, k) for k, shape in enumerate(MODULES)]
    return _first(_causal_case, fn, public) or _dropout(fn)


def _causal_drawn(fn, seeds: tuple[int, ...]) -> str | None:
    return _first(_causal_case, fn, _drawn_problems(seeds, 10))


def _gradients(ran: dict, state: dict, x, g, h: int, dtype) -> str | None:
    """The learner's gradients (of x and every weight) against autograd on the course's."""
    import torch

    t = {k: torch.as_tensor(v).clone().requires_grad_() for k, v in state.items()}
    x_t = torch.as_tensor(x).clone().requires_grad_()
    d = x.shape[-1]
    hd = d // h
    B, T, _ = x.shape
    q, k, v = (x_t @ t["qkv.weight"].T + t["qkv.bias"]).split(d, dim=-1)
    q, k, v = (z.view(B, T, h, hd).transpose(1, 2) for z in (q, k, v))
    s = (q @ k.transpose(-2, -1) / math.sqrt(hd)).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))  # fmt: skip
    y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, d)
    y = y @ t["proj.weight"].T + t["proj.bias"]
    y.backward(torch.as_tensor(g))
    tol = tolerance(np.dtype(dtype))
    pairs = [("x", ran.get("dx"), x_t.grad)] + [
        (name, ran.get("grads", {}).get(name), t[name].grad) for name in sorted(t)
    ]
    for name, got, want in pairs:
        if got is None:
            return f"no gradient reaches {name}: keep the forward pass differentiable"
        got = plain(got, f"the gradient of {name}", dtype=None)
        if got.shape != tuple(want.shape) or not np.allclose(
            got, want.numpy(), rtol=tol.rtol * 10, atol=tol.atol * 10
        ):
            return f"the gradient of {name} differs from autograd on the course's module"
    return None


def _dropout(fn) -> str | None:
    d, h = 12, 3
    state = _causal_state(d, 790, np.float64)
    (x,) = normal(791, (2, 6, d))
    ran = drive(fn, "module_run", {"init": [d, h, 0.5], "state": state, "x": x,
                                    "grad_out": None, "seed": 5, "train": 2})  # fmt: skip
    if sorted(state) != ran.get("params"):
        return "CausalSelfAttention(d_model, n_heads, dropout) must keep the same parameters"
    want, _ = _attend(state, x, h)
    y = plain(ran.get("y"), "the output")
    if not np.allclose(y, want, rtol=1e-6, atol=1e-8):
        return "with dropout=0.5 the eval-mode output changes: dropout acts in training only"
    train = [plain(t, "the training output") for t in ran.get("train", [])]
    if len(train) < 2 or any(np.allclose(t, want) for t in train):
        return "with dropout=0.5 training-mode outputs equal eval-mode ones: no dropout acts"
    return None


CausalSelfAttention = Exercise(
    name="CausalSelfAttention",
    lesson=LESSON,
    read=_read("Attention as a PyTorch module"),
    reference=lambda *args: None,
    probes=lambda: [],
    extra=(_causal_module,),
    drawn=_causal_drawn,
    builds="CausalSelfAttention(d_model, n_heads, dropout), dropout also left out",
)


# --- RepairedBlock --------------------------------------------------------------------------


def _block_state(d: int, seed: int, dtype) -> dict[str, np.ndarray]:
    g = rng(seed)
    state = {f"attn.{k}": v for k, v in _causal_state(d, seed + 1, dtype).items()}
    for name, shape in (("ln1.weight", (d,)), ("ln1.bias", (d,)), ("ln2.weight", (d,)),
                        ("ln2.bias", (d,)), ("mlp.0.weight", (4 * d, d)),
                        ("mlp.0.bias", (4 * d,)), ("mlp.2.weight", (d, 4 * d)),
                        ("mlp.2.bias", (d,))):  # fmt: skip
        base = 1.0 if name.endswith("weight") and name.startswith("ln") else 0.0
        state[name] = (base + 0.3 * g.standard_normal(shape) / math.sqrt(shape[-1])).astype(dtype)
    return state


def _block(state: dict, x, h: int, **change):
    """The course's pre-norm block (:class:`attnlib.torch.gpt.Block`), written out, with the
    attention of :func:`_attend` and its mistakes."""
    import torch
    import torch.nn.functional as F

    t = {k: torch.as_tensor(v) for k, v in state.items()}
    x = torch.as_tensor(x)
    d = x.shape[-1]
    z = F.layer_norm(x, (d,), t["ln1.weight"], t["ln1.bias"])
    attn = {k: v for k, v in state.items() if k.startswith("attn.")}
    a, w = _attend(attn, z, h, prefix="attn.", **change)
    x = x + torch.as_tensor(a)
    z = F.layer_norm(x, (d,), t["ln2.weight"], t["ln2.bias"])
    hidden = F.gelu(z @ t["mlp.0.weight"].T + t["mlp.0.bias"])
    return (x + hidden @ t["mlp.2.weight"].T + t["mlp.2.bias"]).numpy(), w


BLOCK_MISTAKES = (
    ({"scale": "d"}, "scores are still divided by d_head: divide by sqrt(d_head)"),
    ({"causal": "next"}, "the mask lets each position see the next one: tril(..., "
                         "diagonal=1) keeps j <= i + 1; keep j <= i"),
    ({"causal": False}, "there is no causal mask: keep key j <= query i"),
    ({"axis": -2}, "the softmax still runs over the queries (dim=-2): run it over the keys"),
    ({"merge": "reshape"}, "the heads are still merged by reshape alone: transpose (B, h, T, "
                           "d_head) back to (B, T, h, d_head) first"),
)  # fmt: skip


def _block_case(fn, shape: tuple, seed: int, x_seed: int, k: int) -> str | None:
    """The learner's block of ``shape`` on weights made from ``seed`` and inputs from
    ``x_seed``, against the course's; the mistake if any."""
    d, _, _, _, dtype = shape
    state = _block_state(d, seed, dtype)
    found, ran, _, _, w_want = _module_case(fn, shape, state, x_seed, k, _block,
                                            BLOCK_MISTAKES, "RepairedBlock")  # fmt: skip
    if not found and ran.get("weights") is not None:
        w = plain(ran["weights"], "the attention weights")
        if w.shape != w_want.shape or not np.allclose(w, w_want, rtol=1e-4, atol=1e-5):
            found = "attention(z) returns weights that differ from the course's"
    return found and found + _where(shape)


def _repaired_block(fn, peak: Peak) -> str | None:
    public = [(shape, 800 + 10 * k, 820 + k, k) for k, shape in enumerate(MODULES)]
    return _first(_block_case, fn, public)


def _block_drawn(fn, seeds: tuple[int, ...]) -> str | None:
    return _first(_block_case, fn, _drawn_problems(seeds, 20))


RepairedBlock = Exercise(
    name="RepairedBlock",
    lesson=LESSON,
    read=_read("The debugging checklist"),
    reference=lambda *args: None,
    probes=lambda: [],
    extra=(_repaired_block,),
    drawn=_block_drawn,
    builds="RepairedBlock(d_model, n_heads)",
)


# --- check_attention ------------------------------------------------------------------------

MUST_CATCH = len(BUGS) - 3  # "most" of the planted bugs


def _guarded(fn):
    """A candidate for the learner's test, refusing inputs too large for the grader; it takes
    NumPy arrays or torch tensors and answers in the same kind."""
    fn = on_numpy(fn)

    def attention(Q, K, V, mask=None):
        batch = np.broadcast_shapes(np.shape(Q)[:-2], np.shape(K)[:-2])
        if math.prod(batch) * np.shape(Q)[-2] * np.shape(K)[-2] > 2**22:
            raise ValueError("inputs too large for a property test: use a few tokens")
        return fn(Q, K, V, mask)

    return attention


class _Escaped(Exception):
    """The learner's test let an exception of the attention it tested escape."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _property_test(fn, peak: Peak) -> str | None:
    """The learner's test of the right attentions, then of the planted bugs: it must accept
    every right one and catch most bugs."""
    return _judge(fn, _candidates())


def _property_drawn(fn, seeds: tuple[int, ...]) -> str | None:
    """With a grading's secret problems: the same test of the same attentions, the right ones
    and the broken ones in an order drawn for this grading. The public order is the same
    everywhere, so a test that counts its calls (accepting the first ``len(CORRECT)``, rejecting
    every later one) passes it without testing anything; in an order no learner can know, such
    a test rejects a right attention or lets bugs through. A test that looks at what it is
    given is judged the same in any order."""
    order = _candidates()
    random.Random(seeds[0] if seeds else 0).shuffle(order)
    return _judge(fn, order)


def _candidates() -> list[tuple[str, object, bool]]:
    """(name, attention, whether it is right): the right ones first, then the bugs."""
    return [(name, c, True) for name, c in CORRECT.items()] + [
        (name, bug, False) for name, (bug, _) in BUGS.items()
    ]


def _judge(fn, candidates: list[tuple[str, object, bool]]) -> str | None:
    """What is wrong with the learner's test ``fn``, run on ``candidates`` in their order: it
    refuses a right attention or its inputs, lets an attention's exception escape, or catches
    fewer than :data:`MUST_CATCH` bugs. None if nothing is."""
    missed = []
    for name, candidate, right in candidates:
        try:
            caught = _run_test(fn, candidate)
        except _Escaped as escaped:
            error = escaped.error
            if right:  # a right attention refused the inputs: the test's fault
                return (
                    f"check_attention calls a correct attention ({name}) with inputs it "
                    f"refuses: {type(error).__name__}: {str(error)[:200]}"
                )
            return (
                f"check_attention lets the {type(error).__name__} that attention_fn raised "
                f"escape ({str(error)[:200]}); when attention_fn raises, raise an AssertionError "
                "naming the property being checked"
            )
        if right and caught is not None:
            return (
                f"check_attention rejects a correct attention ({name}): it said {caught!r}. "
                "A property test must accept every right answer, however it is written"
            )
        if not right and caught is None:
            missed.append(name)
    missed.sort(key=list(BUGS).index)  # named in one order, whatever order they ran in
    if len(BUGS) - len(missed) < MUST_CATCH:
        return (f"check_attention catches {len(BUGS) - len(missed)} of {len(BUGS)} broken "
                f"attentions; it lets through: {', '.join(missed[:4])}"
                f"{' …' if len(missed) > 4 else ''}")  # fmt: skip
    return None


def _run_test(test, candidate) -> str | None:
    """None when ``test(candidate)`` returned; the message of its AssertionError otherwise.
    :class:`_Escaped` when it let an exception of the candidate's escape: the same exception,
    or, from the grader's sandbox, one rebuilt with the same name and message."""
    guarded, raised = _guarded(candidate), set()  # (name, message): each kept once

    def attention(*args, **kwargs):
        try:
            return guarded(*args, **kwargs)
        except Exception as error:
            raised.add((type(error).__name__, str(error)[:2000]))
            raise

    try:
        test(attention)
    except AssertionError as error:
        return str(error) or "AssertionError"
    except Exception as error:
        if (type(error).__name__, str(error)) in raised:
            raise _Escaped(error) from None
        raise
    return None


check_attention = Exercise(
    name="check_attention",
    lesson=LESSON,
    read=_read("Testing attention by its properties"),
    reference=ref.check_attention,
    probes=lambda: [],
    extra=(_property_test,),
    drawn=_property_drawn,
)


EXERCISES = (
    softmax_backward,
    attention_backward,
    CausalSelfAttention,
    check_attention,
    RepairedBlock,
    cached_attention,
    induction_score,
)
