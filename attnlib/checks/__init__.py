"""attnlib.checks — invariant probes and bug diagnosis for every exercise.

One place serves the lessons' self-checks, the hidden tests nbgrader runs
and the grader: ``check(name, fn)`` returns an :class:`Outcome` whose
``feedback()`` is one plain sentence naming the mistake and where to read;
``assert_correct(name, fn)`` raises :class:`CheckFailed` with that sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from . import _core, lesson01, lesson02, lesson03, lesson04, lesson05, lesson06
from ._core import (
    NOT_WRITTEN,
    CheckFailed,
    Exercise,
    Mistake,
    Outcome,
    Peak,
    Probe,
    Secret,
    plain,
    quiet,
    run,
)

LESSONS = {
    module.LESSON: module.EXERCISES
    for module in (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06)
}
EXERCISES: dict[str, Exercise] = {e.name: e for group in LESSONS.values() for e in group}


def draw_ahead(lesson: str) -> None:
    """Draw the problems the searches of ``lesson``'s exercises hand a right answer, now
    (:func:`._core.drawn`; hypothesis is imported with the first): a grader does it while its
    sandbox template warms."""
    from .search import STRATEGIES

    for exercise in LESSONS.get(lesson, ()):
        if exercise.name in STRATEGIES:
            _core.drawn(exercise.name)


MISSING = object()  # a name the learner's namespace did not have


def _restore(names: dict, saved: dict) -> None:
    for name, value in saved.items():
        if value is MISSING:
            names.pop(name, None)
        else:
            names[name] = value


class Namespace(Protocol):
    """Where the learner's functions live: their kernel's globals, or the grader's sandbox."""

    def learner(self, name: str) -> Callable[..., object] | None:
        """The learner's function ``name``, or None if they have not defined one."""

    def with_references(self, fn: object, references: dict[str, Callable[..., object]]):
        """``fn`` as a function whose calls see ``references`` in place of those names."""


class Globals:
    """The learner's kernel: the names a notebook function sees are its ``__globals__``."""

    def __init__(self, fn: Callable[..., object]):
        self.names = getattr(fn, "__globals__", None)

    def learner(self, name: str) -> Callable[..., object] | None:
        found = self.names.get(name) if isinstance(self.names, dict) else None
        return found if callable(found) else None

    def with_references(self, fn, references):
        names = self.names

        def call(*args, **kwargs):
            saved = {name: names.get(name, MISSING) for name in references}
            names.update(references)
            try:
                return fn(*args, **kwargs)
            finally:
                _restore(names, saved)

        return call


def judge(
    name: str,
    fn: Callable[..., object],
    peak: Peak | None = None,
    namespace: Namespace | None = None,
    secret: Secret | None = None,
) -> Outcome:
    """The verdict on the learner's ``fn`` for exercise ``name``.

    When ``fn`` fails and calls earlier functions of the lesson that the learner wrote and got
    wrong (``Exercise.depends``), it is checked again with the course's reference
    implementations in their place: if it passes then, a mistake in an earlier exercise costs
    points there only, and the verdict says so; if not, the verdict names ``fn``'s own mistake.
    A grading's ``secret`` adds problems of its own to every search (:class:`Secret`).
    """
    if name not in EXERCISES:
        raise ValueError(f"no checks for {name!r}; known exercises: {', '.join(EXERCISES)}")
    exercise = EXERCISES[name]
    meter = {"secret": secret} if peak is None else {"peak": peak, "secret": secret}
    outcome = run(exercise, fn, **meter)
    if outcome.passed or namespace is None or outcome.message.startswith(NOT_WRITTEN):
        return outcome
    theirs = {dep: namespace.learner(dep) for dep in exercise.depends}
    missing = [dep for dep, found in theirs.items() if found is None]
    wrong = [dep for dep, found in theirs.items()
             if found is not None and not judge(dep, found, peak, namespace, secret)]  # fmt: skip
    if not wrong and not missing:
        return outcome
    references = {dep: EXERCISES[dep].reference for dep in wrong + missing}
    fixed = run(exercise, namespace.with_references(fn, references), **meter)
    if not fixed and not wrong:  # nothing of theirs was wrong: the mistake is fn's own
        return outcome
    blamed = wrong + [dep for dep in missing if fixed]  # a missing one only if it mattered
    yours = " and ".join(blamed)
    state = " and ".join(
        f"{dep} {'is not defined' if dep in missing else 'is wrong'}" for dep in blamed
    )
    if fixed:
        return Outcome(name, True, (
            f"right on its own: it fails only because your {state} (with the course's in "
            f"{'its' if len(blamed) == 1 else 'their'} place it passes; fix {blamed[0]} in its "
            "own exercise)"
        ), stand_ins=tuple(blamed))  # fmt: skip
    verb = "is" if len(wrong) == 1 else "are"
    return Outcome(name, False, (
        f"{fixed.message} (found with the course's {yours} in place of yours, which "
        f"{verb} wrong too)"
    ), fixed.read, tuple(wrong + missing))  # fmt: skip


def check(name: str, fn: Callable[..., object]) -> Outcome:
    """Check the learner's ``fn`` for exercise ``name`` (e.g. ``"attention"``)."""
    if name not in EXERCISES:
        raise ValueError(f"no checks for {name!r}; known exercises: {', '.join(EXERCISES)}")
    if not callable(fn):
        return Outcome(name, False, f"{name} is not a function (got {type(fn).__name__})")
    return judge(name, fn, namespace=Globals(fn))


def report(name: str, fn: Callable[..., object]) -> Reported:
    """The lessons' test cells: print ``✓`` and the verdict, or raise :class:`CheckFailed`.

    A wrong answer makes its test cell fail (red) with one sentence — the mistake and the
    section to reread — and no traceback; a right one prints ``✓ name: correct.``. Used as
    ``with report("attention", attention):``, the visible tests in the block run quietly and,
    when the verdict was reached with the course's versions of earlier functions in place of
    the learner's wrong ones, with those in place too: one verdict, whichever way it is read.
    """
    outcome = check(name, fn)
    if not outcome:
        raise CheckFailed(outcome.feedback())
    print("✓ " + outcome.feedback())
    references = {dep: EXERCISES[dep].reference for dep in outcome.stand_ins}
    return Reported(Globals(fn).names if references else None, references)


class Reported:
    """The visible tests' block after a passed verdict (see :func:`report`)."""

    def __init__(self, names: dict | None, references: dict[str, Callable[..., object]]):
        self.names, self.references, self.saved = names, references, {}
        self.silence = quiet()

    def __bool__(self) -> bool:
        return True

    def __enter__(self) -> Reported:
        if self.names is not None:
            self.saved = {name: self.names.get(name, MISSING) for name in self.references}
            self.names.update(self.references)
        self.silence.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.silence.__exit__(*exc)
        if self.names is not None:
            _restore(self.names, self.saved)


def assert_correct(name: str, fn: Callable[..., object]) -> None:
    """Raise :class:`CheckFailed` with the feedback sentence unless ``fn`` passes."""
    outcome = check(name, fn)
    if not outcome:
        raise CheckFailed(outcome.feedback())


__all__ = [
    "EXERCISES",
    "LESSONS",
    "CheckFailed",
    "Exercise",
    "Globals",
    "Mistake",
    "Namespace",
    "Outcome",
    "Probe",
    "Secret",
    "assert_correct",
    "check",
    "judge",
    "plain",
    "quiet",
    "report",
]
