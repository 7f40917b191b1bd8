"""attnlib.checks — invariant probes and bug diagnosis for every exercise.

One place serves the lessons' self-checks, the hidden tests nbgrader runs
and the grader: ``check(name, fn)`` returns an :class:`Outcome` whose
``feedback()`` is one plain sentence naming the mistake and where to read;
``assert_correct(name, fn)`` raises :class:`CheckFailed` with that sentence.
"""

from __future__ import annotations

from collections.abc import Callable

from . import lesson01, lesson02, lesson03, lesson04, lesson05
from ._core import CheckFailed, Exercise, Mistake, Outcome, Probe, plain, quiet, run

LESSONS = {
    module.LESSON: module.EXERCISES for module in (lesson01, lesson02, lesson03, lesson04, lesson05)
}
EXERCISES: dict[str, Exercise] = {e.name: e for group in LESSONS.values() for e in group}


def check(name: str, fn: Callable[..., object]) -> Outcome:
    """Check the learner's ``fn`` for exercise ``name`` (e.g. ``"attention"``)."""
    if name not in EXERCISES:
        raise ValueError(f"no checks for {name!r}; known exercises: {', '.join(EXERCISES)}")
    if not callable(fn):
        return Outcome(name, False, f"{name} is not a function (got {type(fn).__name__})")
    return run(EXERCISES[name], fn)


def report(name: str, fn: Callable[..., object]) -> bool:
    """Print the verdict on the learner's ``fn`` (✓, or the diagnosis) and return it as a bool.

    For the lessons' "check yourself" lines: never raises for a wrong answer.
    """
    outcome = check(name, fn)
    print(("✓ " if outcome else "✗ ") + outcome.feedback())
    return outcome.passed


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
    "Mistake",
    "Outcome",
    "Probe",
    "assert_correct",
    "check",
    "plain",
    "quiet",
    "report",
]
