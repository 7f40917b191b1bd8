"""Checks for lesson 05-complexity: costs, chunked attention, fitted exponents."""

from __future__ import annotations

import numpy as np

from .. import numpy as ref
from ._core import Exercise, Mistake, Peak, Probe, transposed_key
from .probes import far, far_qk, float32, label, normal
from .tolerance import EXACT_COUNT, tolerance, within

LESSON = "05-complexity"

attention_flops = Exercise(
    name="attention_flops",
    lesson=LESSON,
    read="05-complexity, 'Counting the work'",
    reference=ref.attention_flops,
    probes=lambda: [
        Probe(a, label=f"m={a[0]}, n={a[1]}, d_k={a[2]}, d_v={a[3]}")
        for a in ((3, 5, 7, 11), (128, 256, 64, 32), (1, 1, 1, 1), (4096, 4096, 64, 64))
    ],
    tolerance=EXACT_COUNT,
    mistakes=(
        Mistake(
            "counts multiply-adds, not floating-point operations: each is 2 operations "
            "(a multiply and an add)",
            lambda m, n, dk, dv: m * n * (dk + dv),
        ),
        Mistake(
            "counts only Q Kᵀ; the weighted sum A V costs 2·m·n·d_v as well",
            lambda m, n, dk, dv: 2 * m * n * dk,
        ),
        Mistake(
            "counts only A V; the scores Q Kᵀ cost 2·m·n·d_k as well",
            lambda m, n, dk, dv: 2 * m * n * dv,
        ),
        Mistake(
            "uses d_k for both products: A V multiplies (m, n) weights by (n, d_v) values, "
            "2·m·n·d_v operations",
            lambda m, n, dk, dv: 4 * m * n * dk,
        ),
    ),
)

score_matrix_bytes = Exercise(
    name="score_matrix_bytes",
    lesson=LESSON,
    read="05-complexity, 'Where the memory goes'",
    reference=ref.score_matrix_bytes,
    probes=lambda: [
        Probe(a, label="batch={}, heads={}, m={}, n={}, itemsize={}".format(*a))
        for a in ((2, 8, 4096, 4096, 4), (3, 5, 7, 11, 2), (1, 1, 1, 1, 8))
    ],
    tolerance=EXACT_COUNT,
    mistakes=(
        Mistake(
            "counts elements, not bytes: multiply by itemsize",
            lambda b, h, m, n, s: b * h * m * n,
        ),
        Mistake(
            "forgets the heads: there is one score matrix per head",
            lambda b, h, m, n, s: b * m * n * s,
        ),
        Mistake(
            "forgets the batch: there is one score matrix per example",
            lambda b, h, m, n, s: h * m * n * s,
        ),
        Mistake(
            "counts bits: itemsize is already in bytes (4 for float32), so do not multiply by 8",
            lambda b, h, m, n, s: 8 * b * h * m * n * s,
        ),
        Mistake(
            "counts m·m scores: the score matrix is (m, n), m queries by n keys",
            lambda b, h, m, n, s: b * h * m * m * s,
        ),
        Mistake(
            "counts n·n scores: the score matrix is (m, n), m queries by n keys",
            lambda b, h, m, n, s: b * h * n * n * s,
        ),
    ),
)


def _chunked_probes() -> list[Probe]:
    out = []
    for seed, (q, k, v, bs) in enumerate(
        (
            ((2, 3, 10, 4), (2, 3, 13, 4), (2, 3, 13, 6), 4),  # n not a multiple of the block
            ((9, 5), (9, 5), (9, 3), 2),
            ((1, 6, 8), (1, 6, 8), (1, 6, 8), 6),  # one block
            ((2, 7, 4), (2, 5, 4), (2, 5, 2), 1),
        )
    ):
        Q, K, V = normal(110 + seed, q, k, v, scale=3)
        for causal in (False, True):
            text = label(Q=Q, K=K, V=V) + f", block_size={bs}, causal={causal}"
            out.append(Probe((Q, K, V, bs), {"causal": causal}, text))
    return [*out, float32(out[1]), *_far_chunked_probes()]


def _far_chunked_probes() -> list[Probe]:
    """Scores near ±1000 (see probes.far_qk), in blocks of 2 keys, without and with causal."""
    Q, K = far_qk()  # (5, 2) each
    (V,) = normal(115, (5, 3))
    text = "Q (5, 2), K (5, 2), V (5, 3) with scores near ±1000, block_size=2"
    return [
        far((Q, K, V, 2), {"causal": causal}, f"{text}, causal={causal}")
        for causal in (False, True)
    ]


def _online(Q, K, V, block_size, causal=False, *, rescale=True, drop_last=False):
    m, n = Q.shape[-2], K.shape[-2]
    scores = ref.scaled_dot_scores(Q, K)
    if causal:
        scores = np.where(np.tril(np.ones((m, n), bool)), scores, -np.inf)
    peak = np.full(scores.shape[:-1] + (1,), -np.inf)
    total = np.zeros_like(peak)
    acc = np.zeros(
        np.broadcast_shapes(scores.shape[:-1], V.shape[:-2] + (1,))[:-1] + (m, V.shape[-1])
    )
    stops = range(0, n - (n % block_size or block_size) if drop_last else n, block_size)
    with np.errstate(all="ignore"):
        for start in stops:
            s = scores[..., start : start + block_size]
            new = np.maximum(peak, s.max(-1, keepdims=True))
            safe = np.where(np.isfinite(new), new, 0)
            p = np.exp(s - safe)
            r = np.exp(peak - safe) if rescale else 1.0
            total = total * r + p.sum(-1, keepdims=True)
            acc = acc * r + p @ V[..., start : start + block_size, :]
            peak = new
        return acc / total


MEASUREMENTS = 2  # calls measured per setting; the least counts (the first may warm up a library)


def chunked_memory(fn, peak: Peak, n: int = 4096, d: int = 16, block_size: int = 64) -> str | None:
    """Say so when ``fn`` holds or works on far more than ``(m, block_size)`` scores at once.

    Runs ``fn`` on ``n`` queries and keys in float64, without and with ``causal=True``, measuring
    each call with ``peak`` (see :func:`attnlib.checks._core.run`; in a learner's kernel it counts
    native allocations, PyTorch's say, as well as NumPy's). A chunked attention needs a few
    ``n × block_size`` buffers, a naive one the whole ``n × n`` matrix (128 MiB here). Held, a
    quarter of that is too much; touched (read or written, in memory taken before the call too,
    where the platform tells), half of it, since a call also reads its inputs and runs Python: a
    right answer touches 8 to 40 MiB, a naive one writing into memory taken ahead 144.

    Each setting is measured twice and the smaller reading counts, so one-off costs of a first
    call (a library starting its threads) are not taken for the function's own. Every measured
    call gets problems drawn afresh and its answer is compared with the reference: no answer
    computed ahead, and none remembered from an earlier call, can stand in for the work.
    """
    full = n * n * 8
    draw = np.random.default_rng()  # unseen values each time
    for causal in (False, True):
        used = []
        for _ in range(MEASUREMENTS):
            Q, K, V = (draw.standard_normal((n, d)) for _ in range(3))  # (n, d) each
            result, reading = peak(fn, Q, K, V, block_size, causal=causal)
            expected = ref.chunked_attention(Q, K, V, block_size=block_size, causal=causal)
            answer = np.asarray(result)
            if not within(answer, expected, tolerance(np.float64, answer.dtype)):
                return (
                    f"chunked_attention's answer is wrong on the memory check's problem: Q, K, "
                    f"V ({n}, {d}) each in float64, block_size={block_size}, causal={causal}"
                )
            used.append(reading)
        held = min(u.held for u in used)
        touched = min((u.touched for u in used if u.touched is not None), default=0)
        if held > full / 4:
            how = f"it peaked at {held / 2**20:.1f} MiB"
        elif touched > full / 2:
            how = (
                f"it read or wrote {touched / 2**20:.1f} MiB of memory (memory taken before the "
                "call counts too)"
            )
        else:
            continue
        return (
            f"chunked_attention materialises the whole score matrix: with causal={causal} "
            f"{how} for n={n}, while (n, n) scores are {full / 2**20:.0f} MiB and blocks of "
            f"{block_size} keys need about {16 * n * block_size / 2**20:.1f} MiB"
        )
    return None


def _causal_by(mask_of):
    """Chunked attention's result with ``mask_of(Q, K)`` for its causal mask."""
    return lambda Q, K, V, bs, causal=False: ref.attention(
        Q, K, V, mask_of(Q, K) if causal else None
    )[0]


def _aligned_at_the_end(Q, K):
    """Key j <= query i + n - m: the causal mask of queries that are the last m positions."""
    m, n = np.shape(Q)[-2], np.shape(K)[-2]
    return np.arange(n) <= np.arange(m)[:, None] + (n - m)  # (m, n)


def _strictly_before(Q, K):
    """Key j < query i: the causal mask with its diagonal hidden, ``(m, n)``."""
    return np.arange(np.shape(K)[-2]) < np.arange(np.shape(Q)[-2])[:, None]  # (m, n)


chunked_attention = Exercise(
    name="chunked_attention",
    lesson=LESSON,
    read="05-complexity, 'Attention in blocks: the online softmax'",
    reference=lambda Q, K, V, block_size, causal=False: ref.chunked_attention(
        Q, K, V, block_size=block_size, causal=causal
    ),
    probes=_chunked_probes,
    hints=(transposed_key,),
    mistakes=(
        Mistake(
            "the running sum and output are not rescaled when a block raises the maximum: "
            "multiply them by exp(old_max - new_max)",
            lambda *a, **kw: _online(*a, **kw, rescale=False),
        ),
        Mistake(
            "the last, partial key block is dropped: loop over range(0, n, block_size)",
            lambda *a, **kw: _online(*a, **kw, drop_last=True),
        ),
        Mistake(
            "causal=True is ignored: query i may only attend to keys j <= i",
            _causal_by(lambda Q, K: None),
        ),
        Mistake(
            "the causal mask hides the diagonal: query i may attend to keys j <= i, itself "
            "included",
            _causal_by(_strictly_before),
        ),
        Mistake(
            "the causal mask is aligned at the last key (j <= i + n − m, as for a KV cache); "
            "here, as in lesson 02 and PyTorch's is_causal, query i may attend to keys j <= i",
            _causal_by(_aligned_at_the_end),
        ),
        Mistake(
            "scores are not scaled: divide Q Kᵀ by sqrt(d_k) as in attention",
            lambda Q, K, V, bs, causal=False: ref.chunked_attention(
                Q * np.sqrt(Q.shape[-1]), K, V, bs, causal
            ),
        ),
    ),
    extra=(chunked_memory,),
)


def _fit_probes() -> list[Probe]:
    out = []
    g = np.random.default_rng(130)
    for p, c in ((2.0, 1e-9), (1.0, 3e-6), (1.5, 2e-4)):
        ns = np.array([256, 512, 1024, 2048, 4096], dtype=float)
        times = c * ns**p * g.uniform(0.9, 1.1, ns.size)
        out.append(Probe((ns, times), label=f"times ≈ {c:g}·n^{p:g} at n = 256 … 4096"))
    return out


fit_exponent = Exercise(
    name="fit_exponent",
    lesson=LESSON,
    read="05-complexity, 'Measuring the exponent'",
    reference=ref.fit_exponent,
    probes=_fit_probes,
    mistakes=(
        Mistake(
            "the fit is on the raw numbers; fit log(times) against log(ns)",
            lambda ns, t: float(np.polyfit(ns, t, 1)[0]),
        ),
        Mistake(
            "only the times are logged; take the log of ns as well",
            lambda ns, t: float(np.polyfit(ns, np.log(t), 1)[0]),
        ),
        Mistake(
            "the axes are swapped: regress log(times) on log(ns), not log(ns) on log(times)",
            lambda ns, t: float(np.polyfit(np.log(t), np.log(ns), 1)[0]),
        ),
        Mistake(
            "returns the intercept; the exponent is the slope (np.polyfit(...)[0])",
            lambda ns, t: float(np.polyfit(np.log(ns), np.log(t), 1)[1]),
        ),
        Mistake(
            "uses only the first and last points; fit the least-squares line through all",
            lambda ns, t: float(np.log(t[-1] / t[0]) / np.log(ns[-1] / ns[0])),
        ),
    ),
)

EXERCISES = (attention_flops, score_matrix_bytes, chunked_attention, fit_exponent)
