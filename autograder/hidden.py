"""The entry point of hidden test cells: ``check("softmax", softmax)``.

A passing check prints one line to stdout; a failing one raises
``AssertionError`` whose text is the diagnosis (never the test's source), so
nbgrader shows the learner a sentence instead of a traceback into the checks.
"""

from __future__ import annotations

from collections.abc import Callable

from attnlib import checks, quiz


def check(name: str, fn: Callable[..., object]) -> None:
    """Run the hidden checks of exercise ``name`` on the learner's ``fn``."""
    outcome = checks.check(name, fn)
    if not outcome:
        raise AssertionError(outcome.feedback()) from None
    print(f"✓ {name}: hidden checks passed")


def answer(lesson: str, key: str, value: object) -> None:
    """Run the hidden check of mastery question ``key`` of ``lesson`` on the learner's answer."""
    quiz.assert_correct(lesson, key, value)
