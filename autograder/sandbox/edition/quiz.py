"""attnlib.quiz while a notebook is graded: no answer keys here.

The mastery questions are judged by the grader, from outside the sandbox, before their test
cells run; ``check_answer`` prints or raises that verdict. What the learner's numbers are (the
``ATTN_STUDENT`` the grader sets, :mod:`.learner`) and the question sheets that show them are
here; how answers are judged is not.
"""

from __future__ import annotations

from attnlib.checks import CheckFailed
from autograder.sandbox import verdicts

from .learner import as_learner, learner_id, learner_rng  # the learner's own numbers


def check_answer(lesson: str, key: str, answer: object = None) -> None:
    """Print ``✓`` and the grader's verdict on question ``key``, or raise it."""
    verdict = verdicts.given(key) or {"passed": False, "feedback": f"{key}: not checked here"}
    if not verdict.get("passed"):
        raise CheckFailed(str(verdict.get("feedback", "")))
    print("✓ " + str(verdict.get("feedback", "")))


def grade(lesson: str, namespace: object = None, record: bool = True) -> None:
    """Say where the mastery score comes from while a notebook is graded."""
    print(f"{lesson}: the mastery questions are graded in their own test cells above.")


def questions(lesson: str) -> list:
    return []


__all__ = ["as_learner", "check_answer", "grade", "learner_id", "learner_rng", "questions"]
