"""The machinery behind every exercise check: probes, plain arrays, diagnosis.

A check runs a learner's function on a fixed set of *probes* (inputs chosen so
that classic mistakes show: batch ≠ heads ≠ length, fully masked rows, huge
logits, ties), converts whatever came back into fresh float64 arrays, and
compares them with the NumPy reference. When they differ it looks for the
explanation in three places, most specific first:

1. *known mistakes*: each is a function that computes what a particular buggy
   implementation would return; if the learner's output matches one, its
   sentence is the feedback ("scores scaled by d_k instead of sqrt(d_k)");
2. *invariants*: properties every correct answer has (rows sum to one over the
   keys, masked keys get weight 0) whose violation names a place and a value;
3. a plain comparison naming the probe, the shapes and the largest difference.

Nothing here trusts an object the learner's code made: results are copied
into base-class ``numpy.ndarray`` float64 arrays before any comparison, and
the comparison functions are the checker's own, not attributes of the result.
"""

from __future__ import annotations

import copy
import sys
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._shapes import fmt
from .silence import quiet

Arrays = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Probe:
    """One call of an exercise: positional and keyword arguments, and a description."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    nan_hint: str = ""  # the likely cause when a result holds NaN or inf on this probe

    def describe(self) -> str:
        """``"Q (2, 3, 5, 4), K (2, 3, 7, 4)"``-style text naming the inputs."""
        return self.label


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
    """The verdict on one exercise: passed, or one plain sentence and where to read."""

    exercise: str
    passed: bool
    message: str = ""
    read: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def feedback(self) -> str:
        """The sentence a learner sees, with the section to reread."""
        if self.passed:
            return f"{self.exercise}: correct."
        where = f" (Read: {self.read}.)" if self.read else ""
        return f"{self.exercise}: {self.message}{where}"


# An invariant returns None when it holds, else the sentence, or (sentence, section to read).
Invariant = Callable[[Probe, Arrays], "str | tuple[str, str] | None"]
Verdict = tuple[str, str]  # (sentence, section to read)


@dataclass(frozen=True)
class Exercise:
    """Everything needed to check one contract function.

    ``reference`` is the NumPy implementation. ``outputs`` names the results
    (one name per returned array, e.g. ``("output", "weights")``).
    ``requirements`` are checked on every result first (a dtype, say);
    ``mistakes`` are tried in order when the result differs from the reference,
    then ``invariants`` name the property a wrong result breaks. ``extra``
    checks take the function itself (a memory probe, say) and run once all
    probes pass. ``dtype`` is
    what results are converted to before comparing (``None`` keeps theirs).
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
    extra: tuple[Callable[[Callable[..., object]], str | None], ...] = ()
    rtol: float = 1e-6
    atol: float = 1e-8
    dtype: type | None = np.float64


class CheckFailed(AssertionError):
    """Raised by :func:`assert_correct`; its text is the learner's feedback."""


class Abort(Exception):
    """Raised by the function under check to stop the checks altogether.

    Not the learner's exception: the grader raises it when the process running the learner's
    code can no longer answer (it died, or ran out of time), and the verdict says so.
    """


def plain(value: object, what: str, dtype: type | None = np.float64) -> np.ndarray:
    """Copy ``value`` into a fresh base-class array, refusing anything that is not numeric.

    Torch tensors are detached and moved to the CPU first. The copy means the
    learner's object (an ``ndarray`` subclass with a lying ``__eq__``, say) plays
    no part in the comparison.
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


def unpack(result: object, outputs: Sequence[str], dtype: type | None) -> Arrays:
    """Split a function's return value into its named outputs, as plain arrays."""
    if len(outputs) == 1:
        return (plain(result, outputs[0], dtype),)
    if not isinstance(result, tuple | list) or len(result) != len(outputs):
        got = f"a {type(result).__name__}"
        if isinstance(result, tuple | list):
            got += f" of {len(result)} items"
        raise CheckFailed(f"should return ({', '.join(outputs)}), got {got}")
    return tuple(plain(r, name, dtype) for r, name in zip(result, outputs, strict=True))


def close(actual: Arrays, expected: Arrays, rtol: float, atol: float) -> bool:
    """True when every array has the expected shape and values (NaN never matches)."""
    return all(
        a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=False))
        for a, e in zip(actual, expected, strict=True)
    )


def where(index: tuple[int, ...], axes: str = "") -> str:
    """``(b=0, i=1, j=3)`` for the last axes named by ``axes`` (e.g. ``"bij"``)."""
    names = list(axes[-len(index) :]) if axes else []
    names = [""] * (len(index) - len(names)) + names
    return (
        "("
        + ", ".join(f"{n}={i}" if n else str(i) for n, i in zip(names, index, strict=True))
        + ")"
    )


def difference(actual: Arrays, expected: Arrays, outputs: Sequence[str]) -> str:
    """Describe the first output that differs: its shape, NaN, or the largest error."""
    for a, e, name in zip(actual, expected, outputs, strict=True):
        if a.shape != e.shape:
            return f"{name} has shape {fmt(a.shape)}, expected {fmt(e.shape)}"
        if np.isnan(a).any() and not np.isnan(e).any():
            first = tuple(int(i) for i in np.argwhere(np.isnan(a))[0])
            return f"{name} contains NaN at {where(first)}"
        if not np.allclose(a, e, rtol=1e-6, atol=1e-8):
            err = np.abs(a.astype(np.float64) - e.astype(np.float64))  # booleans cannot subtract
            idx = tuple(int(i) for i in np.unravel_index(np.argmax(err), err.shape))
            return (
                f"{name}{list(idx)} is {a[idx]:.6g}, expected {e[idx]:.6g} "
                f"(largest difference {err[idx]:.3g})"
            )
    return "the result differs from the reference"


def traced_peak(fn: Callable[..., object], *args, **kwargs) -> tuple[object, int]:
    """Call ``fn``; return its result and the most memory Python allocated meanwhile."""
    tracemalloc.start()
    try:
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


Peak = Callable[..., tuple[object, int]]


def run(exercise: Exercise, fn: Callable[..., object], peak: Peak = traced_peak) -> Outcome:
    """Check ``fn`` against ``exercise`` on every probe; stop at the first failure.

    ``peak(fn, *args, **kwargs)`` calls ``fn`` and measures the memory the call held; the memory
    probes use it. In a learner's kernel it is :func:`traced_peak`; the grader, which calls the
    learner's function in a sandbox, measures the whole sandbox from outside instead.
    """
    for probe in exercise.probes():
        verdict = _check_probe(exercise, fn, probe)
        if verdict is not None:
            message, read = verdict
            return Outcome(exercise.name, False, message, read or exercise.read)
    for extra in exercise.extra:
        try:
            with quiet():
                message = extra(fn, peak)
        except (CheckFailed, Abort):
            raise
        except Exception as error:  # noqa: BLE001 — the learner's exception is the feedback
            message = f"raised {type(error).__name__}: {error}"
        if message:
            return Outcome(exercise.name, False, message, exercise.read)
    return search(exercise, fn)


SEARCH_EXAMPLES = 40


def search(exercise: Exercise, fn: Callable[..., object]) -> Outcome:
    """Look for a random problem ``fn`` gets wrong; report the smallest one found.

    hypothesis draws problems from the exercise's strategy (derandomised, so every run sees
    the same ones) and, on a failure, shrinks it before the verdict is worded.
    """
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    from .search import STRATEGIES

    strategy = STRATEGIES.get(exercise.name)
    if strategy is None:
        return Outcome(exercise.name, True)
    config = settings(
        max_examples=SEARCH_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    try:
        probe = find(
            strategy(), lambda p: _check_probe(exercise, fn, p) is not None, settings=config
        )
    except NoSuchExample:
        return Outcome(exercise.name, True)
    verdict = _check_probe(exercise, fn, probe)
    if verdict is None:  # it failed during the search but not now: flaky learner code
        return Outcome(exercise.name, False, f"gives different answers on the same input "
                       f"({probe.describe()})", exercise.read)  # fmt: skip
    message, read = verdict
    return Outcome(exercise.name, False, message, read or exercise.read)


def _check_probe(exercise: Exercise, fn: Callable[..., object], probe: Probe) -> Verdict | None:
    args, kwargs = copy.deepcopy(probe.args), copy.deepcopy(probe.kwargs)
    on = f" on {probe.describe()}" if probe.label else ""
    try:
        with quiet():
            result = fn(*args, **kwargs)
    except (CheckFailed, Abort):
        raise
    except Exception as error:  # noqa: BLE001 — the learner's exception is the feedback
        return f"raised {type(error).__name__}: {error}{on}{_hint(error, probe)}", ""
    if not _same_inputs(args, probe.args) or kwargs.keys() != probe.kwargs.keys():
        return f"changed its input arrays in place{on}; work on copies instead", ""
    try:
        actual = unpack(result, exercise.outputs, exercise.dtype)
    except CheckFailed as failure:
        return f"{failure}{on}", ""
    for requirement in exercise.requirements:
        verdict = _verdict(requirement(probe, actual), on)
        if verdict:
            return verdict
    expected = unpack(exercise.reference(*probe.args, **probe.kwargs), exercise.outputs, None)
    if close(actual, expected, exercise.rtol, exercise.atol):
        return None
    # A mistake is recognised even where it also produced NaN (say, an inverted mask that
    # leaves a row with no key): naming the bigger error helps more.
    finite = tuple(np.nan_to_num(a, nan=0.0) for a in actual)
    for mistake in exercise.mistakes:
        if not mistake.applies(probe):
            continue
        try:
            buggy = unpack(mistake.returns(*probe.args, **probe.kwargs), exercise.outputs, None)
        except Exception:  # noqa: BLE001 — a mistake model that cannot run does not match
            continue
        if close(finite, buggy, exercise.rtol, exercise.atol):
            return mistake.explain(probe), mistake.read
    if probe.nan_hint and not all(np.isfinite(a).all() for a in actual):
        return probe.nan_hint, ""
    for invariant in exercise.invariants:
        verdict = _verdict(invariant(probe, actual), on)
        if verdict:
            return verdict
    return f"{difference(actual, expected, exercise.outputs)}{on}", ""


def _verdict(found: str | tuple[str, str] | None, on: str) -> Verdict | None:
    """An invariant's or requirement's finding as ``(sentence + where, section)``."""
    if not found:
        return None
    message, read = (found, "") if isinstance(found, str) else found
    return f"{message}{on}", read


def _hint(error: Exception, probe: Probe) -> str:
    """A likely cause for an exception, when the probe makes one plain."""
    batched = any(isinstance(a, np.ndarray) and a.ndim > 2 for a in probe.args)
    if batched and "matmul" in str(error):
        return (
            "; with batch axes, .T reverses every axis: swap only the last two, "
            "np.swapaxes(K, -1, -2)"
        )
    return ""


def _same_inputs(after: tuple, before: tuple) -> bool:
    for a, b in zip(after, before, strict=True):
        if isinstance(b, np.ndarray):
            if not isinstance(a, np.ndarray) or a.shape != b.shape:
                return False
            if not np.array_equal(a, b, equal_nan=True):
                return False
    return True
