"""attnlib.checks while a notebook is graded: the grader decides, from outside the sandbox.

Before a test cell runs, the grader checks its functions from outside and sends the verdicts
with the cell; these functions print or raise them. There are no checks, probes or reference
implementations here to call, patch or copy.
"""

from __future__ import annotations

from autograder.sandbox import verdicts

from .silence import quiet


class CheckFailed(AssertionError):
    """A failed check; its text is the learner's feedback (one line, no traceback)."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m✗ {self}\x1b[0m"]


def _verdict(name: str) -> dict:
    return verdicts.given(name) or {
        "passed": False,
        "feedback": f"{name}: the grader checks this exercise in its own test cell",
    }


def report(name: str, fn: object):
    """Print ``✓`` and the grader's verdict on ``name``, or raise it as :class:`CheckFailed`.

    Returns the block for the visible tests: quiet, as in a learner's kernel (the grader binds
    any course functions the verdict was reached with for the whole cell).
    """
    verdict = _verdict(name)
    if not verdict.get("passed"):
        raise CheckFailed(str(verdict.get("feedback", "")))
    print("✓ " + str(verdict.get("feedback", "")))
    return quiet()


def assert_correct(name: str, fn: object) -> None:
    """Raise :class:`CheckFailed` with the grader's diagnosis unless ``name`` passed."""
    verdict = _verdict(name)
    if not verdict.get("passed"):
        raise CheckFailed(str(verdict.get("feedback", "")))


def check(name: str, fn: object) -> bool:
    """The grader's verdict on ``name`` as a bool (printing nothing)."""
    return bool(_verdict(name).get("passed"))


__all__ = ["CheckFailed", "assert_correct", "check", "quiet", "report"]
