"""Feedback that is always right: what correct-looking code gets wrong is caught and named.

Each test pairs an answer written in an unusual but correct way, which must pass, with the
correct-looking bug it is meant to catch, which must fail with a sentence that names it and a
section of the course that teaches it.
"""

import dataclasses
import gc
import json
import math
import mmap
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
from hypothesis import given, settings

import attnlib.checks as checks
import attnlib.numpy as an
from attnlib.checks import _core, memory, search, tolerance, weights
from attnlib.checks.probes import normal
from benchmarks.touched import torch_blocks

REPO = Path(__file__).resolve().parents[1]


def lesson_of(name):
    return checks.EXERCISES[name].lesson


def marked(lesson, *values, id=None):
    """A test case with its lesson's marker (``lesson02`` for ``"02-softmax-masking"``)."""
    return pytest.param(*values, marks=getattr(pytest.mark, f"lesson{lesson[:2]}"), id=id)


def for_exercise(name, *values, id=None):
    return marked(lesson_of(name), name, *values, id=id or name)


def headings(lesson):
    """Every markdown heading of the lesson's source notebooks."""
    found = set()
    for path in sorted((REPO / "solutions" / lesson).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                found.update(
                    m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", cell.source, re.M)
                )
    return found


def section_exists(read):
    lesson, section = re.fullmatch(r"(\S+), '(.+)'", read).groups()
    return any(section in h for h in headings(lesson))


# --- building blocks for answers written in unusual ways -----------------------------------


def allowed_of(mask, shape):
    return np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask, shape)


def stable(scores, allowed):
    """Correct: log-sum-exp over the allowed keys only; a row with none is all zeros."""
    has_key = allowed.any(-1, keepdims=True)
    top = np.max(scores, axis=-1, keepdims=True, where=allowed, initial=-np.inf)
    top = np.where(has_key, top, 0.0)
    shifted = np.where(allowed, scores - top, -np.inf)
    lse = np.log(np.where(has_key, np.exp(shifted).sum(-1, keepdims=True), 1.0))
    return np.where(has_key, np.exp(shifted - lse), 0.0)


def without_max(scores, allowed):
    """Correct-looking: exp without subtracting the maximum (fine until scores near ±1000)."""
    e = np.exp(scores) * allowed
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def minus_inf(scores, allowed):
    """Correct-looking: -inf for blocked keys, then a plain softmax (NaN on empty rows)."""
    s = np.where(allowed, scores, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def masked_softmax_with(normalise):
    def masked_softmax(scores, mask=None):
        scores = np.asarray(scores, dtype=float)
        return normalise(scores, allowed_of(mask, scores.shape))

    return masked_softmax


def attention_with(normalise):
    def attention(Q, K, V, mask=None):
        scores = np.einsum("...md,...nd->...mn", Q, K) / math.sqrt(Q.shape[-1])
        w = normalise(scores, allowed_of(mask, scores.shape))
        return w @ V, w

    return attention


def self_with(normalise):
    def self_attention(X, W_q, W_k, W_v, mask=None):
        return attention_with(normalise)(X @ W_q, X @ W_k, X @ W_v, mask)

    return self_attention


def cross_with(normalise):
    def cross_attention(Y, H, W_q, W_k, W_v, mask=None):
        return attention_with(normalise)(Y @ W_q, H @ W_k, H @ W_v, mask)

    return cross_attention


def mha_with(normalise):
    def multi_head_attention(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
        def split(x):  # (B, T, h*d) -> (B, h, T, d)
            return x.reshape(*x.shape[:2], num_heads, -1).transpose(0, 2, 1, 3)

        if mask is not None and np.ndim(mask) <= 3:
            mask = np.asarray(mask)[..., None, :, :]  # a head axis
        heads, w = attention_with(normalise)(
            split(X_q @ W_q), split(X_kv @ W_k), split(X_kv @ W_v), mask
        )
        merged = heads.transpose(0, 2, 1, 3).reshape(*X_q.shape[:2], -1)
        return merged @ W_o, w

    return multi_head_attention


def chunked_with(shift):
    """Online softmax over key blocks; ``shift=False`` forgets to subtract the running max."""

    def chunked_attention(Q, K, V, block_size, causal=False):
        m, n = Q.shape[-2], K.shape[-2]
        top = np.full((*Q.shape[:-1], 1), -np.inf)  # (..., m, 1)
        total, acc = np.zeros_like(top), 0.0
        for start in range(0, n, block_size):
            stop = min(start + block_size, n)
            s = Q @ np.swapaxes(K[..., start:stop, :], -1, -2) / math.sqrt(Q.shape[-1])
            if causal:
                s = np.where(np.arange(start, stop) <= np.arange(m)[:, None], s, -np.inf)
            new = np.maximum(top, s.max(-1, keepdims=True)) if shift else np.zeros_like(top)
            rescale = np.exp(top - new) if shift else 1.0
            p = np.exp(s - new)
            total = total * rescale + p.sum(-1, keepdims=True)
            acc = acc * rescale + p @ V[..., start:stop, :]
            top = new
        return acc / total

    return chunked_attention


def hard_loop_with(empty_rows_zero):
    def hard_attention(Q, K, V, mask=None):
        scores = an.scaled_dot_scores(Q, K)
        allowed = allowed_of(mask, scores.shape)
        best = np.argmax(np.where(allowed, scores, -np.inf), axis=-1)  # (..., m)
        w = (np.arange(scores.shape[-1]) == best[..., None]).astype(float)
        if empty_rows_zero:
            w = w * allowed.any(-1, keepdims=True)
        return w @ V, w

    return hard_attention


WITH_WEIGHTS = {  # exercise → answer built on a given normaliser
    "masked_softmax": masked_softmax_with,
    "attention": attention_with,
    "self_attention": self_with,
    "cross_attention": cross_with,
    "multi_head_attention": mha_with,
}


# --- 1 (a): scores far below and far above zero ------------------------------------------


@pytest.mark.parametrize(("name", "answer"), [for_exercise(n, b) for n, b in WITH_WEIGHTS.items()])
def test_a_correct_answer_with_a_log_sum_exp_softmax_passes(name, answer):
    outcome = checks.check(name, answer(stable))
    assert outcome.passed, outcome.feedback()


@pytest.mark.parametrize(
    ("name", "answer"),
    [*(for_exercise(n, b(without_max)) for n, b in WITH_WEIGHTS.items()),
     for_exercise("chunked_attention", chunked_with(shift=False))],
)  # fmt: skip
def test_exp_without_the_maximum_fails_on_scores_far_from_zero(name, answer):
    outcome = checks.check(name, answer)
    assert not outcome.passed
    assert "exp overflows or underflows" in outcome.message, outcome.feedback()
    assert outcome.read == weights.OVERFLOW


@pytest.mark.lesson02
def test_the_maximum_must_be_taken_after_masking():
    def max_of_every_score(scores, mask=None):  # a masked +5 sets the row's maximum
        e = np.exp(scores - scores.max(-1, keepdims=True)) * allowed_of(mask, scores.shape)
        total = e.sum(-1, keepdims=True)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0)

    outcome = checks.check("masked_softmax", max_of_every_score)
    assert not outcome.passed
    assert "maximum over its allowed keys (after masking)" in outcome.message, outcome.feedback()
    assert "near ±1000" in outcome.message  # the probe it failed on
    assert outcome.read == weights.OVERFLOW


@pytest.mark.lesson05
def test_a_chunked_attention_that_keeps_its_running_max_passes():
    outcome = checks.check("chunked_attention", chunked_with(shift=True))
    assert outcome.passed, outcome.feedback()


# --- 1 (b): a fully masked row, for every function that takes a mask ----------------------


@pytest.mark.parametrize(("name", "answer"), [for_exercise(n, b) for n, b in WITH_WEIGHTS.items()])
def test_minus_inf_without_care_for_empty_rows_fails_for_every_masked_function(name, answer):
    outcome = checks.check(name, answer(minus_inf))
    assert not outcome.passed
    assert "fully masked row gives NaN" in outcome.message, outcome.feedback()
    assert outcome.read == weights.EMPTY_ROWS


@pytest.mark.lesson03
def test_hard_attention_must_zero_a_query_with_no_allowed_key():
    assert checks.check("hard_attention", hard_loop_with(empty_rows_zero=True)).passed
    outcome = checks.check("hard_attention", hard_loop_with(empty_rows_zero=False))
    assert not outcome.passed
    assert "no allowed key must get all-zero weights" in outcome.message, outcome.feedback()


@pytest.mark.parametrize(
    "name",
    [for_exercise(n) for n in ("masked_softmax", "attention", "self_attention",
                               "cross_attention", "hard_attention", "multi_head_attention")],
)  # fmt: skip
def test_every_masked_function_is_probed_with_a_fully_masked_row(name):
    exercise = checks.EXERCISES[name]
    empty = []
    for probe in exercise.probes():
        mask = probe.kwargs.get("mask")
        if mask is not None:
            if name == "multi_head_attention" and np.ndim(mask) <= 3:
                mask = np.asarray(mask)[..., None, :, :]  # masks without a head axis get one
            scores = unpack_weights(exercise, probe)
            empty.append(not np.broadcast_to(mask, scores.shape).any(-1).all())
    assert any(empty), f"no probe of {name} has a query with no allowed key"


def unpack_weights(exercise, probe):
    return _core.unpack(exercise.reference(*probe.args, **probe.kwargs), exercise.outputs)[-1]


# --- 1 (c): memory held by native code counts -----------------------------------------------


def whole_matrix_in_torch(Q, K, V, block_size, causal=False):
    """``torch_blocks`` with every key in one block: the whole score matrix at once."""
    return torch_blocks(Q, K, V, np.shape(K)[-2], causal)


@pytest.mark.lesson05
def test_a_torch_chunked_attention_holding_the_whole_score_matrix_fails_the_memory_probe():
    outcome = checks.check("chunked_attention", whole_matrix_in_torch)
    assert not outcome.passed
    assert "materialises the whole score matrix" in outcome.message, outcome.feedback()
    assert outcome.read == checks.EXERCISES["chunked_attention"].read


@pytest.mark.lesson05
@pytest.mark.parametrize("answer", [an.chunked_attention, torch_blocks], ids=["reference", "torch"])
def test_the_reference_and_a_torch_chunked_attention_in_blocks_pass(answer):
    outcome = checks.check("chunked_attention", answer)
    assert outcome.passed, outcome.feedback()


@pytest.mark.lesson05
def test_the_default_meter_sees_torch_allocations():
    torch = pytest.importorskip("torch")
    matrix = 2048 * 2048 * 8  # one (2048, 2048) float64 matrix: 32 MiB

    def score_matrix():
        return float(torch.ones(2048, 2048, dtype=torch.float64).sum())

    result, used = memory.traced_peak(score_matrix)
    assert result == 2048 * 2048 and used.held >= matrix
    _, small = memory.traced_peak(lambda: torch.ones(64, 64).sum())
    assert small.held < matrix / 8


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_memory_taken_before_a_call_counts_as_touched_once_the_call_uses_it():
    buffer = np.ones((2048, 2048))  # 32 MiB, taken and touched before the call
    _, used = memory.traced_peak(lambda: buffer.fill(2.0))
    assert used.held < buffer.nbytes / 8, used  # nothing more held...
    assert used.touched >= buffer.nbytes, used  # ...but all of it written
    _, idle = memory.traced_peak(lambda: None)
    assert idle.touched < buffer.nbytes / 8, idle  # what it does not use does not count


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_memory_taken_before_a_call_and_given_back_in_it_counts_as_touched():
    """Its marks go with it, so what the process held as the call began and holds no more
    counts: a buffer filled ahead, written in the call and unmapped before it returns."""
    size = 32 * 2**20
    views = [mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)]
    np.frombuffer(views[0])[:] = 1.0  # taken and touched before the call

    def writes_and_gives_back():
        view = views.pop()
        np.frombuffer(view)[:] = 2.0
        view.close()

    used = memory.touched(writes_and_gives_back)
    assert used is not None and used >= size, used


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_memory_taken_and_given_back_within_a_call_counts_as_touched():
    """A call touches at least what it adds: memory taken, written and given back before it
    returns leaves no marks, and counts by the resident set's high-water mark."""
    size = 32 * 2**20
    used = memory.touched(lambda: np.full(size // 8, 2.0).sum())
    assert used is not None and used >= 0.9 * size, used  # the kernel's counts lag a few pages
    idle = memory.touched(lambda: None)
    assert idle is not None and idle < size / 8, idle


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_a_heap_full_of_freed_blocks_is_not_counted_as_memory_a_right_answer_touched():
    """A kernel that has run for a while holds a heap full of freed blocks, and glibc reads every
    one in ``mallinfo2`` (the native meter's samples) and as it sorts the blocks freed since it
    last looked (in the next large request): counted as touched, either failed the right answer
    (25 and 13 MiB touched of an idle call, with 40 MiB freed here)."""
    sizes = np.random.default_rng(0).integers(100, 2000, 10_000)
    blocks = [np.ones(int(n)) for n in sizes]  # (n,) each, on the C heap: about 80 MiB
    kept = blocks[::2]  # every other one freed: holes all over the heap
    del blocks
    try:
        _, idle = memory.traced_peak(lambda: None)
        assert idle.touched < 4 * 2**20, idle
        outcome = checks.check("chunked_attention", an.chunked_attention)
        assert outcome.passed, outcome.feedback()
    finally:
        del kept


HUGE_PAGES = """
import ctypes, json, mmap, re, sys
import numpy as np
from attnlib.checks import memory  # asks for small pages
if sys.argv[1] == "huge":
    ctypes.CDLL(None).prctl(memory.PR_SET_THP_DISABLE, 0, 0, 0, 0)  # huge pages allowed again
region = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # as a heap's
a = np.frombuffer(region, np.uint8)
a[:] = 1  # taken and touched before the call
with open("/proc/self/smaps_rollup") as f:
    huge = int(re.search(r"AnonHugePages:\\s+(\\d+) kB", f.read()).group(1)) * 1024
touched = memory.touched(lambda: int(a[:: 2 << 20].sum()))  # one byte in each 2 MiB
print(json.dumps({"huge": huge, "touched": touched}))
"""


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_a_call_reading_one_byte_of_a_huge_page_is_not_counted_the_whole_page():
    """The kernel marks a transparent huge page used as a whole, 2 MiB for a byte: a right answer
    at n = 2048 read as much as a naive one (17 to 34 MiB on a system whose huge pages are
    ``always`` on). Importing the checks asks for small pages where no library asked for huge
    ones; without that the same call reads a whole huge page for every byte (where the system
    gives huge pages unasked)."""

    def run(pages: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", HUGE_PAGES, pages], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    small = run("small")
    assert small["huge"] == 0 and small["touched"] < 4 * 2**20, small
    huge = run("huge")
    if huge["huge"] == 0:
        pytest.skip("no huge pages unasked on this system: nothing to tell apart")
    assert huge["touched"] >= huge["huge"] / 2, huge


HEAP_ASKED_HUGE = """
import json, re
import numpy as np
from attnlib.checks import memory
big = np.ones(1 << 21)  # 16 MiB, mapped on its own
del big  # freed: glibc's threshold for mapping a block on its own rises past 8 MiB
keep = [np.ones(1 << 20) for _ in range(6)]  # 8 MiB each, now on the heap: NumPy asks huge pages
del keep[::2]
with open("/proc/self/smaps_rollup") as f:
    huge = int(re.search(r"AnonHugePages:\\s+(\\d+) kB", f.read()).group(1)) * 1024
print(json.dumps({"huge": huge, "touched": memory.touched(lambda: None)}))
"""


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_the_heap_stays_on_small_pages_where_numpy_asks_for_huge_ones():
    """NumPy asks for huge pages (``MADV_HUGEPAGE``) for every array of 4 MiB and more, which
    glibc serves from its heap once a large block was freed. Kept huge there (as Linux 6.18 can
    keep what was asked for), 36 MiB of the heap was huge, and with holes freed all over it a call
    that did nothing read 19 MiB."""
    done = subprocess.run(
        [sys.executable, "-c", HEAP_ASKED_HUGE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["huge"] == 0 and got["touched"] < 4 * 2**20, got


@pytest.mark.lesson05
@pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here")
def test_no_garbage_collection_runs_in_a_call_whose_touched_memory_is_read():
    """A full collection walks every object the process holds; in a long session that is more
    memory than the call's own work, so it is held off while the call runs, and back after."""
    during = []
    assert memory.touched(lambda: during.append(gc.isenabled())) is not None
    assert during == [False] and gc.isenabled()


@pytest.mark.lesson05
def test_without_the_c_allocator_the_resident_set_is_measured(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(memory, "_mallinfo2", lambda: None)  # as on a libc without mallinfo2
    assert isinstance(memory.native_meter(), memory.ResidentMeter)
    outcome = checks.check("chunked_attention", whole_matrix_in_torch)
    assert not outcome.passed and "materialises" in outcome.message, outcome.feedback()
    monkeypatch.setattr(memory, "CLEAR_REFS", "/nonexistent/clear_refs")  # no /proc to reset
    _, used = memory.traced_peak(lambda: np.ones((2048, 2048)).sum())  # tracemalloc still counts
    assert used.held >= 2048 * 2048 * 8


@pytest.mark.lesson05
def test_the_graders_own_peak_meter_is_still_used():
    exercise = checks.EXERCISES["chunked_attention"]
    calls = []

    def sandbox_peak(fn, *args, **kwargs):  # the grader's signature: (result, Used)
        calls.append(kwargs.get("causal"))
        return fn(*args, **kwargs), memory.Used(100 * 2**20)

    outcome = _core.run(exercise, an.chunked_attention, peak=sandbox_peak)
    assert not outcome.passed and "100.0 MiB" in outcome.message
    assert calls and set(calls) == {False}  # stops at the first setting that fails
    free = memory.Used(0, None)  # touched unknown: held alone judges
    assert _core.run(exercise, an.chunked_attention, peak=lambda fn, *a, **k: (fn(*a, **k), free))


# --- 2: a mistake is named only where it can be told apart ---------------------------------

# Mistake models that cannot run as a learner's code on every probe (they need d_q = d_k,
# square projections, m = n, or equal shapes): the checks must still never misname them.
RUN_ONLY_ON_SOME_SHAPES = {
    ("dot_scores", 2),
    ("additive_scores", 3),
    ("self_attention", 3),
    ("cross_attention", 1),
}


def as_learner(exercise, mistake):
    """A learner who makes ``mistake`` wherever it shows, and is right everywhere else."""

    def answer(*args, **kwargs):
        if mistake.applies(_core.Probe(args, kwargs)):
            return mistake.returns(*args, **kwargs)
        return exercise.reference(*args, **kwargs)

    return answer


def every_mistake():
    return [
        marked(exercise.lesson, exercise.name, index, id=f"{exercise.name}-{index}")
        for exercise in checks.EXERCISES.values()
        for index in range(len(exercise.mistakes))
    ]


def sentences(exercise, mistake):
    if isinstance(mistake.message, str):
        return {mistake.message}
    return {mistake.explain(p) for p in exercise.probes()}


@pytest.mark.parametrize(("name", "index"), every_mistake())
def test_every_classic_mistake_is_named_right_and_sends_to_its_section(name, index):
    exercise = checks.EXERCISES[name]
    mistake = exercise.mistakes[index]
    outcome = checks.check(name, as_learner(exercise, mistake))
    assert not outcome.passed
    named = [
        m for m in exercise.mistakes if any(s in outcome.message for s in sentences(exercise, m))
    ]
    assert all(m is mistake for m in named), f"misnamed: {outcome.feedback()}"
    if (name, index) not in RUN_ONLY_ON_SOME_SHAPES:
        assert named, f"not named: {outcome.feedback()}"
        assert outcome.read == (mistake.read or exercise.read)
    assert section_exists(outcome.read), outcome.read


def divide_by_sqrt_of_queries(Q, K):
    return Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-2])


@pytest.mark.lesson01
def test_a_probe_where_mistakes_coincide_names_none_and_a_richer_one_tells_them_apart():
    square = normal(7, (3, 4), (3, 4))  # m = n: sqrt(m) and sqrt(n) give the same scores
    wide = normal(8, (3, 4), (5, 4))
    exercise = checks.EXERCISES["scaled_dot_scores"]
    only_square = dataclasses.replace(exercise, probes=lambda: [_core.Probe(tuple(square))])
    outcome = _core.run(only_square, divide_by_sqrt_of_queries)
    assert not outcome.passed
    assert "number of" not in outcome.message, outcome.feedback()  # neither m nor n is named
    assert "expected" in outcome.message and "Q (3, 4), K (3, 4)" in outcome.message
    both = dataclasses.replace(
        exercise, probes=lambda: [_core.Probe(tuple(square)), _core.Probe(tuple(wide))]
    )
    outcome = _core.run(both, divide_by_sqrt_of_queries)
    assert "square root of the number of queries m" in outcome.message, outcome.feedback()


@pytest.mark.lesson02
def test_a_shrunk_fully_masked_problem_is_described_not_misnamed():
    def minus_1e9_for_one_row_masks(scores, mask=None):  # right on every fixed probe
        if mask is not None and np.ndim(mask) == 2 and np.shape(mask)[0] == 1:
            s = np.where(mask, scores, -1e9)
            e = np.exp(s - s.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return an.masked_softmax(scores, mask)

    outcome = checks.check("masked_softmax", minus_1e9_for_one_row_masks)
    assert not outcome.passed
    assert "mask is ignored" not in outcome.message and "inverted" not in outcome.message
    assert "has no allowed key but its weights sum to 1" in outcome.message, outcome.feedback()
    assert outcome.read == weights.EMPTY_ROWS


@pytest.mark.lesson03
def test_an_overflowing_self_attention_is_not_called_an_inverted_mask():
    outcome = checks.check("self_attention", self_with(without_max))
    assert "inverted" not in outcome.message and "exp overflows" in outcome.message


# --- 3: inputs changed in place, keyword arguments included ---------------------------------


def flipping_mask(answer):
    """``answer``, after turning the caller's mask upside down in place (and back, for itself)."""

    def flips(*args, mask=None):
        if mask is not None:
            np.logical_not(mask, out=mask)
            return answer(*args, mask=~mask)
        return answer(*args)

    return flips


@pytest.mark.parametrize(
    "name",
    [for_exercise(n) for n in ("masked_softmax", "attention", "self_attention",
                               "cross_attention", "hard_attention", "multi_head_attention")],
)  # fmt: skip
def test_a_mask_flipped_in_place_is_reported(name):
    outcome = checks.check(name, flipping_mask(getattr(an, name)))
    assert not outcome.passed
    assert "changed its input arrays in place (mask was modified) on " in outcome.message
    assert "mask" in outcome.message.split(" on ", 1)[1]  # the probe, with its mask


@pytest.mark.lesson02
def test_a_positional_input_changed_in_place_is_named():
    def scales_in_place(Q, K, V, mask=None):
        Q /= math.sqrt(Q.shape[-1])
        return an.attention(Q * math.sqrt(Q.shape[-1]), K, V, mask)

    outcome = checks.check("attention", scales_in_place)
    assert "changed its input arrays in place (Q was modified)" in outcome.message


# --- 4: axis names, sections, the K.T hint ---------------------------------------------------


def leaking_first_query(scores, mask=None):
    w = an.masked_softmax(scores, mask)
    if mask is not None and np.ndim(scores) == 3:  # only the (B, m, n) probe
        w = w.copy()
        w[..., 0, :] = an.softmax(scores[..., 0, :])
    return w


@pytest.mark.lesson02
def test_a_three_axis_probe_calls_its_first_axis_the_batch():
    outcome = checks.check("masked_softmax", leaking_first_query)
    assert re.search(r"at \(b=\d+, i=0, j=\d+\)", outcome.message), outcome.feedback()
    assert "h=" not in outcome.message


@pytest.mark.lesson02
def test_a_four_axis_probe_names_batch_and_head():
    def leaking(scores, mask=None):
        w = an.masked_softmax(scores, mask)
        if mask is not None and np.ndim(scores) == 4:
            w = w.copy()
            w[1, 2, 0] = an.softmax(scores[1, 2, 0])
        return w

    outcome = checks.check("masked_softmax", leaking)
    assert re.search(r"at \(b=1, h=2, i=0, j=\d+\)", outcome.message), outcome.feedback()


def lesson_sections():
    cases = []
    for name, exercise in checks.EXERCISES.items():
        reads = {exercise.read, *(m.read for m in exercise.mistakes if m.read)}
        cases += [for_exercise(name, read, id=f"{name}-{read}") for read in sorted(reads)]
    return cases + [marked(read, None, read, id=read) for read in weights.SECTIONS]


@pytest.mark.parametrize(("name", "read"), lesson_sections())
def test_every_section_a_verdict_can_name_exists(name, read):
    assert section_exists(read), f"{name}: no heading for {read!r}"


@pytest.mark.parametrize(
    "name", [for_exercise(n) for n in ("self_attention", "cross_attention", "multi_head_attention")]
)
def test_masking_verdicts_in_later_lessons_send_to_lesson_02(name):
    exercise = checks.EXERCISES[name]
    about_masks = [
        m for m in exercise.mistakes if "mask" in m.explain(next(iter(exercise.probes())))
    ]
    assert all(m.read in weights.SECTIONS for m in about_masks)
    outcome = checks.check(name, WITH_WEIGHTS[name](minus_inf))
    assert outcome.read == weights.EMPTY_ROWS, outcome.feedback()


def weights_with_K_T(Q, K, mask):
    return an.masked_softmax(Q @ K.T / math.sqrt(Q.shape[-1]), mask)  # right only without batch


def self_with_K_T(X, W_q, W_k, W_v, mask=None):
    w = weights_with_K_T(X @ W_q, X @ W_k, mask)
    return w @ (X @ W_v), w


def mha_projecting_the_queries_wrongly(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return mha_with(stable)(X_q, X_kv, W_q.T, W_k, W_v, W_o, num_heads, mask)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        for_exercise("self_attention", self_with_K_T),
        for_exercise("multi_head_attention", mha_projecting_the_queries_wrongly),
    ],
)
def test_the_transposed_key_hint_stays_out_of_exercises_without_K(name, answer):
    outcome = checks.check(name, answer)
    assert "raised ValueError: matmul" in outcome.message, outcome.feedback()
    assert "swapaxes(K" not in outcome.message


def attention_with_K_T(Q, K, V, mask=None):
    w = weights_with_K_T(Q, K, mask)
    return w @ V, w


@pytest.mark.parametrize(
    ("name", "answer"),
    [for_exercise("dot_scores", lambda Q, K: Q @ K.T),
     for_exercise("attention", attention_with_K_T),
     for_exercise("hard_attention", lambda Q, K, V, mask=None: an.hard_attention(Q, K, V, mask)
                  if K.ndim == 2 else attention_with_K_T(Q, K, V, mask)),
     for_exercise("chunked_attention", lambda Q, K, V, bs, causal=False: (Q @ K.T) @ V)],
)  # fmt: skip
def test_the_transposed_key_hint_fires_where_K_is_an_input(name, answer):
    outcome = checks.check(name, answer)
    assert "swap only the last two" in outcome.message, outcome.feedback()


def attention_with_mask_transposed(Q, K, V, mask=None):
    """Transposes the mask: (n, m) against scores (m, n), shapes that do not broadcast, though
    neither is the other with an axis taken out."""
    scores = an.scaled_dot_scores(Q, K)  # (..., m, n)
    if mask is not None:
        scores = np.where(np.swapaxes(mask, -1, -2), scores, -np.inf)
    w = an.masked_softmax(scores)
    return w @ V, w


@pytest.mark.lesson02
def test_the_keepdims_hint_fires_only_for_an_axis_taken_out():
    def no_keepdims(x, axis=-1):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / e.sum(axis=axis)  # (..., n) over (...): the summed axis is gone

    outcome = checks.check("softmax", no_keepdims)
    assert "could not be broadcast" in outcome.message, outcome.feedback()
    assert "keepdims=True" in outcome.message
    outcome = checks.check("attention", attention_with_mask_transposed)
    assert "could not be broadcast" in outcome.message, outcome.feedback()
    assert "keepdims" not in outcome.message


@pytest.mark.lesson01
def test_the_projection_hint_fires_only_for_the_widths_of_q_and_k():
    def projected_wrong(Q, K, W_q, W_k, v):
        return np.tanh((Q @ W_k)[..., :, None, :] + (K @ W_q)[..., None, :, :]) @ v

    def v_first(Q, K, W_q, W_k, v):
        return v @ np.tanh((Q @ W_q)[..., :, None, :] + (K @ W_k)[..., None, :, :])

    outcome = checks.check("additive_scores", projected_wrong)
    assert "goes through W_q (d_q, h)" in outcome.message, outcome.feedback()
    outcome = checks.check("additive_scores", v_first)
    assert "raised ValueError: matmul" in outcome.message, outcome.feedback()
    assert "goes through W_q" not in outcome.message


@pytest.mark.lesson02
def test_a_function_without_a_return_is_told_it_returns_nothing():
    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis, keepdims=True))
        e / e.sum(axis, keepdims=True)  # computed, never returned

    def attention(Q, K, V, mask=None):
        an.attention(Q, K, V, mask)

    outcome = checks.check("softmax", softmax)
    assert "returns None: end it with `return`" in outcome.message, outcome.feedback()
    outcome = checks.check("attention", attention)
    assert "returns None: end it with `return output, weights`" in outcome.message, (
        outcome.feedback()
    )


@pytest.mark.lesson02
def test_a_changed_signature_is_told_how_the_checks_call_the_function():
    def softmax(x):  # no axis parameter
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def padding_mask(lengths):  # no max_len
        return lengths

    outcome = checks.check("softmax", softmax)
    assert "unexpected keyword argument 'axis'" in outcome.message, outcome.feedback()
    assert "the checks call softmax(x, axis=…)" in outcome.message
    outcome = checks.check("padding_mask", padding_mask)
    assert "the checks call padding_mask(lengths, max_len)" in outcome.message, outcome.feedback()

    def helper(x):
        return x

    def softmax_with_a_bad_call(x, axis=-1):
        return helper(x, axis)  # a TypeError of the learner's own helper, not of the signature

    outcome = checks.check("softmax", softmax_with_a_bad_call)
    assert "helper() takes 1 positional argument" in outcome.message, outcome.feedback()
    assert "the checks call" not in outcome.message


# --- 5: tolerances per dtype ---------------------------------------------------------------

FLOAT_EXERCISES = [
    "dot_scores", "scaled_dot_scores", "additive_scores", "cosine_scores", "softmax",
    "masked_softmax", "attention", "self_attention", "cross_attention", "hard_attention",
    "split_heads", "merge_heads", "multi_head_attention", "chunked_attention",
]  # fmt: skip


def in_float32(fn):
    """``fn`` computing in float32: every floating-point input narrowed first."""

    def narrow(value):
        return value.astype(np.float32) if getattr(value, "dtype", None) == np.float64 else value

    def answer(*args, **kwargs):
        return fn(*map(narrow, args), **{k: narrow(v) for k, v in kwargs.items()})

    return answer


@pytest.mark.parametrize("name", [for_exercise(n) for n in FLOAT_EXERCISES])
def test_a_float32_probe_exists_and_a_float32_implementation_passes(name):
    exercise = checks.EXERCISES[name]
    assert any(p.dtype == np.float32 for p in exercise.probes()), f"{name} has no float32 probe"
    outcome = checks.check(name, in_float32(exercise.reference))
    assert outcome.passed, outcome.feedback()


@pytest.mark.lesson02
def test_a_torch_float32_attention_passes():
    torch = pytest.importorskip("torch")

    def attention(Q, K, V, mask=None):
        q, k, v = (torch.as_tensor(a).float() for a in (Q, K, V))
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~torch.as_tensor(mask), float("-inf"))
        w = torch.nan_to_num(torch.softmax(s, -1))
        return w @ v, w

    outcome = checks.check("attention", attention)
    assert outcome.passed, outcome.feedback()


@pytest.mark.lesson02
def test_a_softmax_right_only_in_float64_fails_on_the_float32_probe_with_its_cause():
    def shifts_only_huge_inputs(x, axis=-1):  # float64 holds exp(±110); float32 does not
        x = np.asarray(x)
        shift = np.max(x, axis=axis, keepdims=True) if np.abs(x).max() > 500 else 0
        e = np.exp(x - shift)
        return e / e.sum(axis=axis, keepdims=True)

    outcome = checks.check("softmax", shifts_only_huge_inputs)
    assert not outcome.passed
    assert "in float32, exp overflows above about 88" in outcome.message, outcome.feedback()
    assert outcome.read == weights.OVERFLOW


@pytest.mark.lesson02
def test_results_are_compared_in_their_own_dtype():
    exercise = checks.EXERCISES["softmax"]
    probe = next(iter(exercise.probes()))
    (x,) = probe.args
    off = an.softmax(x) * (1 + 1e-4)  # a float32-sized error
    assert not exercise_passes(exercise, probe, off)  # in float64: too far
    assert exercise_passes(exercise, probe, off.astype(np.float32))  # in float32: close enough
    loose = [tolerance.TOLERANCES[np.dtype(t)].rtol for t in ("float64", "float32", "float16")]
    assert loose == sorted(loose)


def exercise_passes(exercise, probe, result):
    return _core.attempt(exercise, lambda *a, **k: result, probe).agrees


# --- 6: batch axes the lessons do not teach; crashes name the probe -------------------------


def two_pass_in_place(Q, K, V, block_size, causal=False):
    """Two passes with accumulators shaped like Q and updated in place (out=, +=)."""
    m, n = Q.shape[-2], K.shape[-2]

    def block(start):
        s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2) / math.sqrt(Q.shape[-1])
        if causal:
            s = np.where(
                np.arange(start, min(start + block_size, n)) <= np.arange(m)[:, None], s, -np.inf
            )
        return s

    top = np.full((*Q.shape[:-1], 1), -np.inf)  # (..., m, 1)
    for start in range(0, n, block_size):
        np.maximum(top, block(start).max(-1, keepdims=True), out=top)
    total, acc = np.zeros_like(top), np.zeros((*Q.shape[:-1], V.shape[-1]))
    for start in range(0, n, block_size):
        p = np.exp(block(start) - top)
        total += p.sum(-1, keepdims=True)
        acc += p @ V[..., start : start + block_size, :]
    return acc / total


@pytest.mark.lesson05
def test_a_two_pass_chunked_attention_with_in_place_updates_passes():
    outcome = checks.check("chunked_attention", two_pass_in_place)
    assert outcome.passed, outcome.feedback()


def batch_shapes(probe):
    arrays = [a for a in probe.args if isinstance(a, np.ndarray) and a.ndim >= 2]
    return {a.shape[:-2] for a in arrays[:2]}


@pytest.mark.parametrize(
    "name",
    [for_exercise(n) for n in ("dot_scores", "scaled_dot_scores", "additive_scores",
                               "cosine_scores", "attention", "cross_attention",
                               "hard_attention", "chunked_attention")],
)  # fmt: skip
def test_queries_and_keys_share_batch_axes_unless_the_lesson_says_they_broadcast(name):
    differ = []

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(probe=search.STRATEGIES[name]())
    def record(probe):
        differ.append(len(batch_shapes(probe)) > 1)

    record()
    assert any(differ) == (name in search.BROADCASTS)


@pytest.mark.lesson05
def test_a_crash_found_by_the_search_names_the_problem_it_crashed_on():
    def refuses_long_blocks(Q, K, V, block_size, causal=False):  # the fixed probes never try
        if block_size > K.shape[-2]:
            raise ValueError(f"block_size {block_size} exceeds n = {K.shape[-2]}")
        return an.chunked_attention(Q, K, V, block_size, causal)

    outcome = checks.check("chunked_attention", refuses_long_blocks)
    assert not outcome.passed
    assert re.search(
        r"raised ValueError: block_size \d+ exceeds n = \d+ on Q [(\[].*[)\]], K [(\[].*[)\]], "
        r"V [(\[].*[)\]], block_size=\d+, causal=(True|False)",  # shapes, or a tiny array's values
        outcome.message,
    ), outcome.feedback()


@pytest.mark.lesson02
def test_a_probe_without_a_label_describes_its_arguments():
    probe = _core.Probe((np.zeros((2, 5, 4), np.float32), np.zeros((2, 7, 4))), {"mask": None})
    assert probe.describe(("Q", "K")) == "Q (2, 5, 4) float32, K (2, 7, 4), mask=None"
    tiny = _core.Probe((np.array([[0.5, -2.0]]), np.zeros((1, 5))))  # 2 numbers, then 5
    assert tiny.describe(("Q", "K")) == "Q [[ 0.5, -2. ]], K (1, 5)"
    exercise = dataclasses.replace(checks.EXERCISES["attention"], probes=lambda: [probe])

    def crashes(Q, K, V=None, mask=None):
        raise ValueError("no V")

    outcome = _core.run(exercise, crashes)
    assert (
        outcome.message == "raised ValueError: no V on Q (2, 5, 4) float32, K (2, 7, 4), mask=None"
    )


# --- no warning of the checker's own reaches the learner ------------------------------------


def cosine_only_queries(Q, K, eps=1e-8):
    norms = np.maximum(np.linalg.norm(Q, axis=-1, keepdims=True), eps)
    return (Q / norms) @ np.swapaxes(K, -1, -2)


@pytest.mark.parametrize(
    ("name", "answer", "passes"),
    [for_exercise("cosine_scores", an.cosine_scores, True, id="cosine-correct"),
     for_exercise("cosine_scores", cosine_only_queries, False, id="cosine-wrong"),
     for_exercise("masked_softmax", masked_softmax_with(minus_inf), False, id="softmax-nan"),
     for_exercise("chunked_attention", chunked_with(shift=True), True, id="chunked-correct")],
)  # fmt: skip
def test_the_checks_raise_no_warning_of_their_own(name, answer, passes):
    expected = checks.check(name, answer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcome = checks.check(name, answer)
    assert outcome == expected and outcome.passed == passes, outcome.feedback()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checks.check(name, answer)
    assert caught == []
