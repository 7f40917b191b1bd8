"""The machinery behind every exercise check: probes, plain arrays, diagnosis.

A check runs a learner's function on a fixed set of *probes* (inputs chosen so
that classic mistakes show: batch ≠ heads ≠ length, fully masked rows, logits
far above and far below zero, ties, float32 inputs), copies whatever came back
into fresh plain arrays, and compares them with the NumPy reference within the
tolerance of the dtype the result came in (:mod:`.tolerance`). When they differ
it looks for the explanation in three places, most specific first:

1. *known mistakes*: each is a function that computes what a particular buggy
   implementation would return. A mistake is named only on a probe where it can
   be told apart, its output differing from the reference's and from every
   other mistake's; if the result fits several, another failing probe is tried;
2. *invariants*: properties every correct answer has (rows sum to one over the
   keys, masked keys get weight 0) whose violation names a place and a value;
3. a plain comparison naming the probe, the shapes and the largest difference.

Every verdict names the probe it was found on and the section to reread.

Nothing here trusts an object the learner's code made: results are copied
into base-class ``numpy.ndarray`` arrays before any comparison, and the
comparison functions are the checker's own, not attributes of the result.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import os
import random
import re
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .._shapes import fmt
from .memory import Used, traced_peak
from .silence import quiet
from .tolerance import Tolerance, alike, deviation, input_dtype, rounded, tolerance, within

Arrays = tuple[np.ndarray, ...]
NOT_WRITTEN = "not written yet: replace `raise NotImplementedError()` with your code"


SHOWN = 4  # a NumPy array of at most this many numbers is named by its values, not its shape


def arguments(named: Iterable[tuple[str, object]]) -> str:
    """``"Q (2, 5, 4), K (2, 7, 4) float32, T=3"``: arrays by shape (and dtype unless float64
    or bool), anything else by value. A tiny array (the search's smallest problems, often) is
    written out, ``"Q [[0.5]], K [[-2.0]]"``, so that the learner can make the very call."""
    parts = []
    for name, value in named:
        shape = getattr(value, "shape", None)
        if shape is None:
            parts.append(f"{name}={value!r}")
            continue
        dtype = str(getattr(value, "dtype", ""))
        note = f" {dtype}" if dtype.startswith(("float", "bfloat")) and dtype != "float64" else ""
        parts.append(f"{name} {_values_or_shape(value)}{note}")
    return ", ".join(parts)


def _values_or_shape(value: object) -> str:
    if isinstance(value, np.ndarray) and 0 < value.size <= SHOWN and value.dtype.kind in "biuf":
        return np.array2string(value, precision=6, separator=", ", max_line_width=10**6)
    return fmt(np.shape(value))


@dataclass(frozen=True)
class Probe:
    """One call of an exercise: positional and keyword arguments, and a description."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    nan_hint: str = ""  # the likely cause when a result holds NaN or inf on this probe
    nan_read: str = ""  # the section that explains nan_hint ("" for the exercise's own)

    def describe(self, names: Sequence[str] = ()) -> str:
        """``"Q (2, 3, 5, 4), K (2, 3, 7, 4)"``-style text naming the inputs.

        The label if there is one, else made from the arguments, named by ``names`` (the
        exercise's parameters) where known.
        """
        if self.label:
            return self.label
        positional = [
            (names[i] if i < len(names) else f"argument {i + 1}", value)
            for i, value in enumerate(self.args)
        ]
        return arguments([*positional, *self.kwargs.items()])

    @property
    def dtype(self) -> np.dtype | None:
        """The coarsest floating-point dtype among the inputs (``None`` if none is a float)."""
        return input_dtype([*self.args, *self.kwargs.values()])


@dataclass(frozen=True)
class Mistake:
    """A classic bug: what the buggy code returns, and the sentence that explains it."""

    message: str | Callable[[Probe], str]
    returns: Callable[..., object]
    applies: Callable[[Probe], bool] = lambda probe: True
    read: str = ""  # the section that explains this mistake, if not the exercise's own

    def explain(self, probe: Probe) -> str:
        """The sentence for this probe (a message may depend on the probe's arguments)."""
        return self.message(probe) if callable(self.message) else self.message


@dataclass(frozen=True)
class Outcome:
    """The verdict on one exercise: passed, or one plain sentence and where to read.

    A passed outcome may carry a ``message`` too: a note, e.g. that the exercise is right and
    only an earlier function it calls is wrong.
    """

    exercise: str
    passed: bool
    message: str = ""
    read: str = ""
    stand_ins: tuple[str, ...] = ()  # earlier exercises judged with the course's in their place

    def __bool__(self) -> bool:
        return self.passed

    def feedback(self) -> str:
        """The sentence a learner sees, with the section to reread."""
        if self.passed:
            return f"{self.exercise}: {self.message or 'correct.'}"
        where = f" (Read: {self.read}.)" if self.read else ""
        return f"{self.exercise}: {self.message}{where}"


# An invariant returns None when it holds, else the sentence, or (sentence, section to read).
Invariant = Callable[[Probe, Arrays], "str | tuple[str, str] | None"]
Verdict = tuple[str, str]  # (sentence, section to read; "" for the exercise's own)
Hint = Callable[[Exception, Probe], str]  # a likely cause of an exception ("" if none)
Peak = Callable[..., tuple[object, Used]]


@dataclass(frozen=True)
class Secret:
    """Problems of one grading's own, drawn beside the public ones (see :func:`search`).

    The public problems are the same everywhere, so a learner can record them ahead (a spy
    handed to the checks) and submit a table of their results. A grading that keeps ``seed``
    where the learner's code cannot read it meets ``count`` more problems per exercise (searched,
    or made by :attr:`Exercise.drawn`) that no learner can know before: a right answer passes
    them as it passes the public ones.
    """

    seed: int
    count: int = 10

    def seeds(self, name: str) -> tuple[int, ...]:
        """``count`` seeds of exercise ``name``'s own: the problems of an exercise with no
        search (:attr:`Exercise.drawn`) are made from them."""
        draw = random.Random(f"{self.seed}:{name}")
        return tuple(draw.getrandbits(31) for _ in range(self.count))


SECRET_NOTE = (
    " (on a problem drawn for this grading alone; your own test cell meets only the checks' "
    "usual problems, so it may have passed this answer)"
)


@dataclass(frozen=True)
class Exercise:
    """Everything needed to check one contract function.

    ``reference`` is the NumPy implementation, always called on float64 copies of the
    probe's inputs. ``outputs`` names the results (one name per returned array, e.g.
    ``("output", "weights")``). ``requirements`` are checked on every result first (a
    dtype, say); ``mistakes`` are tried when the result differs from the reference, then
    ``invariants`` name the property a wrong result breaks. ``extra`` checks take the
    function itself and a ``peak`` meter (a memory probe, say) and run once all probes
    pass. ``tolerance`` overrides the by-dtype table (:mod:`.tolerance`) for results that
    must be exact whatever their dtype (counts); ``hints`` name the likely cause of an
    exception where the probe makes one plain. ``builds`` is how the checks construct a class
    (``"CausalSelfAttention(d_model, n_heads, dropout)"``), for a constructor that refuses it.
    An exercise with no search may have problems ``drawn`` from a grading's :class:`Secret`
    instead: ``drawn(fn, seeds)`` makes one problem of each seed and checks ``fn`` on them once
    its public checks pass.
    """

    name: str
    lesson: str
    read: str
    reference: Callable[..., object]
    probes: Callable[[], Iterable[Probe]]
    outputs: tuple[str, ...] = ("result",)
    requirements: tuple[Invariant, ...] = ()
    mistakes: tuple[Mistake, ...] = ()
    invariants: tuple[Invariant, ...] = ()
    extra: tuple[Callable[[Callable[..., object], Peak], str | None], ...] = ()
    drawn: Callable[[Callable[..., object], tuple[int, ...]], str | None] | None = None
    tolerance: Tolerance | None = None
    hints: tuple[Hint, ...] = ()
    depends: tuple[str, ...] = ()  # earlier exercises of the lesson a solution may call
    flatten: Callable[[object], object] | None = None  # nested results → one item per output
    builds: str = ""

    def flat(self, result: object) -> object:
        """``result`` with one item per name of ``outputs`` (``(out, (K, V))`` → 3 items)."""
        return result if self.flatten is None else self.flatten(result)

    @functools.cached_property
    def parameters(self) -> tuple[str, ...]:
        """The reference's parameter names (``("Q", "K", "V", "mask")``), to name inputs."""
        try:
            return tuple(inspect.signature(self.reference).parameters)
        except (TypeError, ValueError):
            return ()


class CheckFailed(AssertionError):
    """A failed check; its text is the learner's feedback.

    In a notebook it shows as that one sentence, not a traceback: IPython renders an exception
    with a ``_render_traceback_`` method by what the method returns. Under nbgrader's Validate
    the sentence is wrapped instead: ``nbgrader validate`` prints every line of a failed cell's
    error cut at 90 columns, and the mistake must not be what is cut.
    """

    def _render_traceback_(self) -> list[str]:
        text = f"✗ {self}"
        if os.environ.get("NBGRADER_VALIDATING"):  # set by nbgrader's Validator while it runs
            text = "\n".join(textwrap.wrap(text, VALIDATE_COLUMNS, break_on_hyphens=False))
        return [f"\x1b[31m{text}\x1b[0m"]


# What fits on a line of ``nbgrader validate``'s report: 90 columns (Validator.width) less its
# indent (4) and the "..." it puts where it cuts (3).
VALIDATE_COLUMNS = 83


class Abort(Exception):
    """Raised by the function under check to stop the checks altogether.

    Not the learner's exception: the grader raises it when the process running the learner's
    code can no longer answer (it died, or ran out of time), and the verdict says so.
    """


# ---------------------------------------------------------------------------------------------
# plain arrays


def plain(value: object, what: str, dtype: type | None = np.float64) -> np.ndarray:
    """Copy ``value`` into a fresh base-class array, refusing anything that is not numeric.

    Torch tensors are detached and moved to the CPU first. The copy means the
    learner's object (an ``ndarray`` subclass with a lying ``__eq__``, say) plays
    no part in the comparison. ``dtype=None`` keeps the value's own dtype.
    """
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().to("cpu")
        value = value.float() if value.dtype == torch.bfloat16 else value
        value = value.numpy()
    try:
        array = np.array(value, copy=True, subok=False)
    except Exception as error:  # noqa: BLE001 — any failure is the learner's to see
        raise CheckFailed(f"{what} could not be read as an array ({error})") from None
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise CheckFailed(
            f"{what} should be an array of numbers, got {type(value).__name__} of dtype "
            f"{array.dtype}"
        )
    if dtype is not None:
        array = array.astype(dtype)
    return np.ascontiguousarray(array)


def _torch():
    """PyTorch if something already imported it (else no value can be a tensor)."""
    return sys.modules.get("torch")


def unpack(result: object, outputs: Sequence[str], dtype: type | None = None) -> Arrays:
    """Split a function's return value into its named outputs, as plain arrays."""
    if result is None:  # the commonest slip of all: the value is computed, never returned
        ending = f"`return {', '.join(outputs)}`" if len(outputs) > 1 else "`return` and its result"
        raise CheckFailed(f"returns None: end it with {ending}")
    if len(outputs) == 1:
        return (plain(result, outputs[0], dtype),)
    if not isinstance(result, tuple | list) or len(result) != len(outputs):
        got = f"a {type(result).__name__}"
        if isinstance(result, tuple | list):
            got += f" of {len(result)} items"
        raise CheckFailed(f"should return ({', '.join(outputs)}), got {got}")
    return tuple(plain(r, name, dtype) for r, name in zip(result, outputs, strict=True))


def exact(values: tuple | dict) -> tuple | dict:
    """Copies of ``values`` with every floating-point array in float64 (the reference's view)."""

    def widen(v: object) -> object:
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            return v.astype(np.float64)
        return v

    if isinstance(values, dict):
        return {k: widen(v) for k, v in values.items()}
    return tuple(widen(v) for v in values)


def where(index: tuple[int, ...], axes: Sequence[str] = ()) -> str:
    """``(b=0, i=1, j=3)``: ``index`` with its axes named by ``axes`` (one name per axis,
    e.g. ``"bij"`` or ``axis_names(3)``; missing names on the left stay positional)."""
    names = list(axes)[-len(index) :] if axes and index else []
    names = [""] * (len(index) - len(names)) + names
    return (
        "("
        + ", ".join(f"{n}={i}" if n else str(i) for n, i in zip(names, index, strict=True))
        + ")"
    )


def axis_names(ndim: int) -> list[str]:
    """Names of the axes of scores or weights ``(..., m, n)`` with ``ndim`` axes, by the
    course's layout: ``i`` (query) and ``j`` (key) last, before them ``b`` (batch) and, in
    ``(B, h, m, n)``, ``h`` (head); more leading axes are numbered batch axes."""
    last = ["i", "j"][-ndim:] if ndim > 0 else []
    lead = max(ndim - 2, 0)
    batch = ["b", "h"][:lead] if lead <= 2 else [f"b{k}" for k in range(lead - 1)] + ["h"]
    return batch + last


def _value(x: object) -> str:
    return str(bool(x)) if isinstance(x, np.bool_ | bool) else f"{float(x):.6g}"


def difference(
    actual: Arrays, expected: Arrays, outputs: Sequence[str], tolerances: Sequence[Tolerance]
) -> str:
    """Describe the first output that differs: its shape, NaN, or the largest error."""
    for a, e, name, tol in zip(actual, expected, outputs, tolerances, strict=True):
        if a.shape != e.shape:
            return f"{name} has shape {fmt(a.shape)}, expected {fmt(e.shape)}"
        if np.isnan(a).any() and not np.isnan(e).any():
            first = tuple(int(i) for i in np.argwhere(np.isnan(a))[0])
            return f"{name} contains NaN at {where(first)}"
        miss = np.nan_to_num(deviation(a, e, tol), nan=np.inf)
        if (miss > 0).any():
            idx = tuple(int(i) for i in np.unravel_index(np.argmax(miss), miss.shape))
            err = abs(float(a[idx]) - float(e[idx])) if np.isfinite(miss[idx]) else np.inf
            return (
                f"{name}{list(idx)} is {_value(a[idx])}, expected {_value(e[idx])} "
                f"(largest difference {err:.3g})"
            )
    return "the result differs from the reference"


# ---------------------------------------------------------------------------------------------
# one probe


@dataclass(frozen=True)
class Attempt:
    """The learner's function on one probe: its result as plain arrays, or why there is none."""

    probe: Probe
    verdict: Verdict | None = None  # a crash, changed inputs, an unreadable result, …
    actual: Arrays = ()
    expected: Arrays = ()  # the reference, rounded to each result's dtype
    tolerances: tuple[Tolerance, ...] = ()

    @property
    def agrees(self) -> bool:
        return self.verdict is None and all(
            within(a, e, t)
            for a, e, t in zip(self.actual, self.expected, self.tolerances, strict=True)
        )


@dataclass(frozen=True)
class Failure:
    """Why one probe failed: the sentence, its section, and the mistake it names if any."""

    probe: Probe
    message: str
    read: str = ""
    named: Mistake | None = None
    suspects: tuple[Mistake, ...] = ()  # fit the result here but could not be told apart


def attempt(exercise: Exercise, fn: Callable[..., object], probe: Probe) -> Attempt:
    """Call ``fn`` on copies of the probe's inputs and line its result up with the reference."""
    args, kwargs = copy.deepcopy(probe.args), copy.deepcopy(probe.kwargs)
    try:
        with quiet():
            result = fn(*args, **kwargs)
    except (CheckFailed, Abort):
        raise
    except Exception as error:  # noqa: BLE001 — the learner's exception is the feedback
        if isinstance(error, NotImplementedError) and not str(error):
            return Attempt(probe, (NOT_WRITTEN, ""))
        hint = _hint(exercise, error, probe)
        on = _on(exercise, probe)
        return Attempt(probe, (f"raised {type(error).__name__}: {error}{on}{hint}", ""))
    changed = _changed_input(exercise, probe, args, kwargs)
    if changed:
        return Attempt(
            probe,
            (f"changed its input arrays in place ({changed} was modified)"
             f"{_on(exercise, probe)}; work on copies instead", ""),
        )  # fmt: skip
    try:
        actual = unpack(exercise.flat(result), exercise.outputs)
    except CheckFailed as failure:
        return Attempt(probe, (f"{failure}{_on(exercise, probe)}", ""))
    for requirement in exercise.requirements:
        found = requirement(probe, actual)
        if found:  # where the probe is described only for a failure: most calls pass
            return Attempt(probe, _verdict(found, _on(exercise, probe)))
    reference = unpack(
        exercise.flat(exercise.reference(*exact(probe.args), **exact(probe.kwargs))),
        exercise.outputs,
    )
    tolerances = tuple(_tolerance(exercise, probe, a) for a in actual)
    expected = tuple(rounded(e, a.dtype) for e, a in zip(reference, actual, strict=True))
    return Attempt(probe, None, actual, expected, tolerances)


WIDENED = (
    "correct. A note: float32 inputs came back as {dtype}; the lessons keep the input dtype "
    "(math.sqrt of a size keeps float32, np.sqrt and dtype=float make float64), which matters "
    "in float16 — see 01-scoring, 'Why divide by sqrt(d_k)?'."
)
NARROWED = (
    "correct. A note: float64 inputs came back as {dtype}, which holds about {digits} significant "
    "digits where float64 holds 15; the lessons keep the input dtype (an astype or a dtype= "
    "that names a smaller float drops them) — see 01-scoring, 'Why divide by sqrt(d_k)?'."
)


def dtype_note(exercise: Exercise, fn: Callable[..., object], probes: list[Probe]) -> str:
    """A passing verdict's note when ``fn`` answers in another float dtype than the reference
    does — wider for float32 inputs, narrower for float64 ones — else "": not a mistake, but
    worth a note. The first float32 probe and the first float64 one are tried."""
    for dtype in (np.float32, np.float64):
        probe = next((p for p in probes if p.dtype == dtype), None)
        theirs = _other_dtype(exercise, fn, probe) if probe is not None else None
        if theirs is not None and dtype == np.float32 and theirs.itemsize > 4:
            return WIDENED.format(dtype=theirs)
        if theirs is not None and dtype == np.float64 and theirs.itemsize < 8:
            return NARROWED.format(dtype=theirs, digits=np.finfo(theirs).precision)
    return ""


def _other_dtype(exercise: Exercise, fn: Callable[..., object], probe: Probe) -> np.dtype | None:
    """The float dtype of ``fn``'s first result on ``probe`` that differs from the reference's
    float dtype (``None`` if none does, or if the call raises: it passed the checks)."""
    try:
        with quiet():
            actual = unpack(exercise.flat(fn(*copy.deepcopy(probe.args),
                                             **copy.deepcopy(probe.kwargs))),
                            exercise.outputs)  # fmt: skip
        expected = unpack(exercise.flat(exercise.reference(*probe.args, **probe.kwargs)),
                          exercise.outputs)  # fmt: skip
    except (CheckFailed, Abort):
        raise
    except Exception:  # noqa: BLE001 — it passed the checks; a note is not worth failing
        return None
    for a, e in zip(actual, expected, strict=True):
        if e.dtype == probe.dtype and a.dtype.kind == "f" and a.dtype != e.dtype:
            return a.dtype
    return None


def examine(exercise: Exercise, fn: Callable[..., object], probe: Probe) -> Failure | None:
    """``None`` when ``fn`` is right on ``probe``, else why it is not."""
    tried = attempt(exercise, fn, probe)
    if tried.verdict is not None:
        return Failure(probe, *tried.verdict)
    if tried.agrees:
        return None
    return diagnose(exercise, tried)


def diagnose(exercise: Exercise, tried: Attempt) -> Failure:
    """Name the mistake behind a wrong result, if one can be told apart; else describe it."""
    probe = tried.probe
    suspects, named = _suspects(exercise, tried)
    if named is not None:
        return Failure(probe, named.explain(probe), named.read, named=named)
    message, read = _describe(exercise, tried)
    return Failure(probe, message, read, suspects=suspects)


def _suspects(exercise: Exercise, tried: Attempt) -> tuple[tuple[Mistake, ...], Mistake | None]:
    """The mistakes whose output fits the result, and the one among them (if exactly one)
    whose output differs from the reference's and from every other mistake's."""
    models = _mistake_outputs(exercise, tried.probe)
    # A mistake is recognised even where it also produced NaN (an inverted mask that leaves
    # a row with no key, say): naming the bigger error helps more.
    finite = tuple(
        np.where(np.isnan(a), 0.0, a) if a.dtype.kind == "f" else a for a in tried.actual
    )
    fits = [(m, out) for m, out in models if _all(within, finite, out, tried.tolerances)]
    told_apart = [
        m
        for m, out in fits
        if not _all(alike, out, tried.expected, tried.tolerances)
        and not any(_all(alike, out, other, tried.tolerances) for n, other in models if n is not m)
    ]
    named = told_apart[0] if len(fits) == 1 and len(told_apart) == 1 else None
    return tuple(m for m, _ in fits), named


def _mistake_outputs(exercise: Exercise, probe: Probe) -> list[tuple[Mistake, Arrays]]:
    """What each mistake that applies to ``probe`` returns there (those that can run)."""
    args, kwargs = exact(probe.args), exact(probe.kwargs)
    out = []
    for mistake in exercise.mistakes:
        if not mistake.applies(probe):
            continue
        try:
            found = exercise.flat(mistake.returns(*args, **kwargs))
            out.append((mistake, unpack(found, exercise.outputs)))
        except Exception:  # noqa: BLE001 — a mistake model that cannot run does not match
            continue
    return out


def _all(compare, first: Arrays, second: Arrays, tolerances: Sequence[Tolerance]) -> bool:
    return all(compare(a, b, t) for a, b, t in zip(first, second, tolerances, strict=True))


def _describe(exercise: Exercise, tried: Attempt) -> Verdict:
    """No mistake named: the probe's NaN hint, a broken invariant, or the plain difference."""
    probe, actual, on = tried.probe, tried.actual, _on(exercise, tried.probe)
    if probe.nan_hint and not all(np.isfinite(a).all() for a in actual):
        return f"{probe.nan_hint}{on}", probe.nan_read
    for invariant in exercise.invariants:
        verdict = _verdict(invariant(probe, actual), on)
        if verdict:
            return verdict
    text = difference(actual, tried.expected, exercise.outputs, tried.tolerances)
    return f"{text}{on}", ""


def _clarify(
    exercise: Exercise, fn: Callable[..., object], failure: Failure, elsewhere: Iterable[Probe]
) -> Failure:
    """Where several mistakes fit ``failure`` equally, look for a probe that tells them apart."""
    if not failure.suspects:
        return failure
    for probe in elsewhere:
        if probe is failure.probe:
            continue
        other = examine(exercise, fn, probe)
        if other is not None and other.named in failure.suspects:
            return other
    return failure


def _tolerance(exercise: Exercise, probe: Probe, result: np.ndarray) -> Tolerance:
    if exercise.tolerance is not None:
        return exercise.tolerance
    return tolerance(result.dtype, probe.dtype)


def _on(exercise: Exercise, probe: Probe) -> str:
    return f" on {probe.describe(exercise.parameters)}"


def _verdict(found: str | tuple[str, str] | None, on: str) -> Verdict | None:
    """An invariant's or requirement's finding as ``(sentence + where, section)``."""
    if not found:
        return None
    message, read = (found, "") if isinstance(found, str) else found
    return f"{message}{on}", read


def _hint(exercise: Exercise, error: Exception, probe: Probe) -> str:
    """The first of the exercise's hints, then of the hints for every exercise, that explains
    ``error`` on ``probe``."""
    for hint in (*exercise.hints, *HINTS):
        text = hint(error, probe)
        if text:
            return text
    return _signature(exercise, error, probe)


def _signature(exercise: Exercise, error: Exception, probe: Probe) -> str:
    """A TypeError about the call of the learner's function itself (a parameter renamed, left
    out or added): how the checks call it."""
    if not _refused_call(error, exercise.name):
        return ""
    names = exercise.parameters
    call = [names[i] if i < len(names) else f"argument {i + 1}" for i in range(len(probe.args))]
    call += [f"{key}=…" for key in probe.kwargs]
    return (
        f"; the checks call {exercise.name}({', '.join(call)}): keep the name and the "
        "parameters the exercise gives"
    )


def _refused_call(error: Exception, callee: str) -> bool:
    """A TypeError about the call of ``callee`` itself: ``"softmax() got an unexpected …"``,
    ``"Block.__init__() takes 3 positional …"`` (Python 3.11 names it by its qualified name)."""
    own_call = rf"(?:[\w.<>]*\.)?{re.escape(callee)}\(\) "
    return type(error).__name__ == "TypeError" and re.match(own_call, str(error)) is not None


BROADCAST_SHAPES = re.compile(r"could not be broadcast together with shapes((?: \([\d,]*\))+)")


def broadcast_shapes(error: Exception) -> list[tuple[int, ...]]:
    """The shapes NumPy names when it cannot broadcast them together (none for other errors)."""
    found = BROADCAST_SHAPES.search(str(error))
    if not found:
        return []
    return [
        tuple(int(size) for size in text.split(",") if size)
        for text in re.findall(r"\(([\d,]*)\)", found.group(1))
    ]


def dropped_axis(error: Exception, probe: Probe) -> str:
    """NumPy could not broadcast two shapes, one of them the other with an axis taken out: a
    sum or a maximum over an axis without ``keepdims=True``."""
    shapes = broadcast_shapes(error)
    for longer in shapes:
        for shorter in shapes:
            if len(longer) == len(shorter) + 1 and any(
                longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer))
            ):
                return (
                    "; a sum or a maximum over an axis drops that axis: keep it with "
                    "keepdims=True, so that the result lines up with the array it came from"
                )
    return ""


def einsum_without_ellipsis(error: Exception, probe: Probe) -> str:
    """An einsum whose terms name only the last axes, given arrays with batch axes."""
    if "einstein sum" in str(error) and "ellipsis" in str(error):
        return (
            "; with batch axes, start each einsum term with ... so that they pass through, "
            "e.g. '...md,...nd->...mn'"
        )
    return ""


HINTS = (dropped_axis, einsum_without_ellipsis)  # hints for every exercise, after its own


MATMUL_ERRORS = ("matmul", "batch2", "mat1 and mat2")  # NumPy's and PyTorch's wording


def transposed_key(error: Exception, probe: Probe) -> str:
    """For exercises given the keys ``K`` as second argument: ``K.T`` on batched keys."""
    K = probe.args[1] if len(probe.args) > 1 else None
    batched = isinstance(K, np.ndarray) and K.ndim > 2
    if batched and any(word in str(error) for word in MATMUL_ERRORS):
        return (
            "; with batch axes, .T reverses every axis: swap only the last two, "
            "np.swapaxes(K, -1, -2)"
        )
    return ""


def _changed_input(exercise: Exercise, probe: Probe, args: tuple, kwargs: dict) -> str:
    """The name of the first input the call changed in place ("" if none)."""
    names = exercise.parameters
    for i, (after, before) in enumerate(zip(args, probe.args, strict=True)):
        if not _same(after, before):
            return names[i] if i < len(names) else f"argument {i + 1}"
    for key, before in probe.kwargs.items():
        if not _same(kwargs.get(key), before):
            return key
    return ""


def _same(after: object, before: object) -> bool:
    if not isinstance(before, np.ndarray):
        return True
    return (
        isinstance(after, np.ndarray)
        and after.shape == before.shape
        and after.dtype == before.dtype
        and bool(np.array_equal(after, before, equal_nan=before.dtype.kind == "f"))
    )


# ---------------------------------------------------------------------------------------------
# a whole exercise


@contextlib.contextmanager
def calm() -> Iterator[None]:
    """The checker's own arithmetic (references, mistake models, comparisons) warns no one."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def run(
    exercise: Exercise,
    fn: Callable[..., object],
    peak: Peak = traced_peak,
    secret: Secret | None = None,
) -> Outcome:
    """Check ``fn`` against ``exercise`` on every probe; stop at the first failure.

    ``peak(fn, *args, **kwargs)`` calls ``fn`` and measures the memory the call held and the
    memory it touched (:class:`~attnlib.checks.memory.Used`); the memory probes use it. In a
    learner's kernel it is :func:`traced_peak`; the grader, which calls the learner's function in
    a sandbox, measures the whole sandbox from outside instead. A grading with a ``secret``
    searches its own problems too (:func:`search`).
    """
    with calm():
        probes = list(exercise.probes())
        for index, probe in enumerate(probes):
            failure = examine(exercise, fn, probe)
            if failure is not None:
                return _outcome(exercise, _clarify(exercise, fn, failure, probes[index + 1 :]))
        whole = [functools.partial(extra, fn, peak) for extra in exercise.extra]
        message = _extras(exercise, whole)
        if message:
            return Outcome(exercise.name, False, message, exercise.read)
        if secret is not None and exercise.drawn is not None:
            message = _extras(exercise, [lambda: exercise.drawn(fn, secret.seeds(exercise.name))])
            if message:
                return Outcome(exercise.name, False, message + SECRET_NOTE, exercise.read)
        outcome = search(exercise, fn, secret)
        note = dtype_note(exercise, fn, probes) if outcome else ""
        return Outcome(exercise.name, True, note) if note else outcome


def _extras(exercise: Exercise, checks: Iterable[Callable[[], str | None]]) -> str | None:
    """The first message of ``checks`` (the exercise's checks of the whole function, each
    called with it), or of the exception one raised."""
    for extra in checks:
        try:
            with quiet():
                message = extra()
        except (CheckFailed, Abort):
            raise
        except Exception as error:  # noqa: BLE001 — the learner's exception is the feedback
            unwritten = isinstance(error, NotImplementedError) and not str(error)
            message = (
                NOT_WRITTEN
                if unwritten
                else f"raised {type(error).__name__}: {error}{_constructor(exercise, error)}"
            )
        if message:
            return message
    return None


def _constructor(exercise: Exercise, error: Exception) -> str:
    """A TypeError of the learner's class's ``__init__``: how the checks build it."""
    if exercise.builds and _refused_call(error, "__init__"):
        return f"; the checks build {exercise.builds}: keep the parameters the exercise gives"
    return ""


def _outcome(exercise: Exercise, failure: Failure) -> Outcome:
    return Outcome(exercise.name, False, failure.message, failure.read or exercise.read)


SEARCH_EXAMPLES = 40
_SEARCHING = threading.RLock()  # a search inside a search (a function that checks) nests


@contextlib.contextmanager
def _no_local_constants() -> Iterator[None]:
    """hypothesis, for the duration of one search, without the integers it collects from "local"
    modules (anything outside site-packages: the course's editable install, a learner's helper
    file, the grader's own code) and mixes into what it draws. Those differ between a learner's
    kernel and the grader, so the problems a search meets — and the smallest failing example a
    verdict names — would too; and collecting them writes a cache into the working directory.
    hypothesis has no setting for this (its issue #4627), so its collector is replaced while the
    search runs; if its internals change, the search simply runs as hypothesis has it."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover — another hypothesis
        yield
        return
    collect = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if collect is None or not hasattr(cache, "clear"):  # pragma: no cover
        yield
        return
    none = Constants()
    with _SEARCHING:
        providers._get_local_constants = lambda: none
        cache.clear()  # draws decided with some other set of constants
        try:
            yield
        finally:
            providers._get_local_constants = collect
            cache.clear()


RICHER = 4  # failing problems (the first found, before shrinking) tried to tell mistakes apart


def _find(
    name: str, condition: Callable[[Probe], bool], secret: Secret | None = None
) -> Probe | None:
    """hypothesis' smallest problem of exercise ``name``'s strategy that meets ``condition``
    (derandomised: every run draws the same problems; with a ``secret``, ``secret.count`` problems
    drawn from its seed instead, the same for every run with that seed), or None if none of them
    does."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    from .search import STRATEGIES

    config = settings(
        max_examples=SEARCH_EXAMPLES if secret is None else secret.count,
        derandomize=secret is None,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    with _no_local_constants():
        try:
            seeded = None if secret is None else random.Random(secret.seed)
            return find(STRATEGIES[name](), condition, settings=config, random=seeded)
        except NoSuchExample:
            return None


@functools.lru_cache(maxsize=256)  # the public draws of every exercise, and a few gradings'
def drawn(name: str, secret: Secret | None = None) -> tuple[Probe, ...]:
    """The problems the search of exercise ``name`` (with ``secret``: that grading's own search)
    hands a function that gets all of them right, in order. The draws are derandomised (or
    seeded) and a draw depends only on the problems before it while none has failed, so they
    are the same for every function up to its first failure: drawn once per process, they spare
    every right answer hypothesis' own work."""
    met: list[Probe] = []

    def never(probe: Probe) -> bool:
        met.append(copy.deepcopy(probe))
        return False

    with calm():
        _find(name, never, secret)
    return tuple(met)


def search(exercise: Exercise, fn: Callable[..., object], secret: Secret | None = None) -> Outcome:
    """Look for a random problem ``fn`` gets wrong; report the smallest one found.

    hypothesis draws problems from the exercise's strategy (derandomised, so every run sees
    the same ones) and, on a failure, shrinks it before the verdict is worded. Where the
    smallest problem cannot tell the fitting mistakes apart, the first failures found (larger,
    before shrinking) are tried for one that can. A function that gets every problem right is
    only run on the problems (:func:`drawn`): the same verdict, without hypothesis' overhead.

    With a ``secret`` (a grading's, :class:`Secret`), a function right on every public problem
    meets the grading's own problems too, searched and shrunk the same way from the secret's
    seed; a failure there says so in the verdict (:data:`SECRET_NOTE`).
    """
    from .search import STRATEGIES

    if exercise.name not in STRATEGIES:
        return Outcome(exercise.name, True)
    failing: list[Probe] = []

    def fails(probe: Probe) -> bool:
        if attempt(exercise, fn, probe).agrees:
            return False
        failing.append(probe)
        return True

    with calm():
        found = None  # the search that met a failure: the public one (None) or the secret's
        first = next((probe for probe in drawn(exercise.name) if fails(probe)), None)
        if first is None and secret is not None:
            found = secret
            first = next((probe for probe in drawn(exercise.name, secret) if fails(probe)), None)
        if first is None:
            return Outcome(exercise.name, True)
        failing.clear()  # hypothesis meets them again, in the same order, and shrinks
        probe = _find(exercise.name, fails, found)
        failure = None if probe is None else examine(exercise, fn, probe)
    note = "" if found is None else SECRET_NOTE
    if failure is None:  # it failed during the search but not now: flaky learner code
        shown = (probe or first).describe(exercise.parameters)
        return Outcome(exercise.name, False, f"gives different answers on the same input "
                       f"({shown}){note}", exercise.read)  # fmt: skip
    with calm():
        outcome = _outcome(exercise, _clarify(exercise, fn, failure, failing[:RICHER]))
    return replace(outcome, message=outcome.message + note)
