"""Mastery checks: a few auto-graded questions at the end of each lesson.

Each lesson's questions live in ``attnlib/quiz/lessonNN.py`` as a tuple of
:class:`Question`. A question checks an answer by computing the right one
(with :mod:`attnlib.numpy` where it can), so rewording a question never
leaves a stale answer behind. In a notebook::

    q1 = (2, 5, 7)                       # the learner's answer cell
    quiz.assert_correct("02-softmax-masking", "q1", q1)   # its hidden test
    quiz.grade("02-softmax-masking", globals())           # score + mastery record

``grade`` records the result with :mod:`attnlib.mastery` (not while nbgrader
is grading, which sets ``NBGRADER_EXECUTION``), so the next lesson can say
whether this one is mastered.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import mastery


@dataclass(frozen=True)
class Question:
    """One mastery question: its key (``"q1"``), prompt, topic to revisit and checker."""

    key: str
    prompt: str
    topic: str
    check: Callable[[object], bool]
    points: int = 1

    def accepts(self, answer: object) -> bool:
        """True if ``answer`` is right; an answer that breaks the checker is wrong."""
        try:
            return bool(self.check(answer))
        except Exception:  # noqa: BLE001 — a malformed answer is simply not right
            return False


_MODULES = {
    "01-scoring": "lesson01",
    "02-softmax-masking": "lesson02",
    "03-self-cross": "lesson03",
    "04-multi-head": "lesson04",
    "05-complexity": "lesson05",
}


def questions(lesson: str) -> tuple[Question, ...]:
    """The mastery questions of ``lesson``, in order."""
    if lesson not in _MODULES:
        raise ValueError(f"unknown lesson {lesson!r}; lessons are {', '.join(_MODULES)}")
    try:
        module = importlib.import_module(f"{__name__}.{_MODULES[lesson]}")
    except ModuleNotFoundError:
        return ()
    return module.QUESTIONS


def question(lesson: str, key: str) -> Question:
    """One question by key, or a ValueError listing the keys there are."""
    found = {q.key: q for q in questions(lesson)}
    if key not in found:
        raise ValueError(f"lesson {lesson} has no question {key!r}; it has {', '.join(found)}")
    return found[key]


def assert_correct(lesson: str, key: str, answer: object) -> None:
    """Hidden-test entry: raise ``AssertionError`` naming the topic unless ``answer`` is right."""
    q = question(lesson, key)
    if not q.accepts(answer):
        raise AssertionError(f"{key}: not right yet. Revisit: {q.topic}.")
    print(f"✓ {key}")


def grade(lesson: str, answers: Mapping[str, object], record: bool = True) -> mastery.Attempt:
    """Score ``answers`` (e.g. ``globals()``), print a line per question, record mastery.

    A question whose key is missing from ``answers`` counts as wrong.
    """
    score, total, missed = 0, 0, []
    for q in questions(lesson):
        total += q.points
        ok = q.key in answers and q.accepts(answers[q.key])
        score += q.points if ok else 0
        if not ok:
            missed.append(q.topic)
        print(
            f"{'✓' if ok else '✗'} {q.key}: {q.prompt}" + ("" if ok else f"  → revisit {q.topic}")
        )
    if total == 0:
        raise ValueError(f"lesson {lesson} has no mastery questions yet")
    attempt = mastery.Attempt(lesson, score, total, tuple(dict.fromkeys(missed)))
    if record and not os.environ.get("NBGRADER_EXECUTION"):
        attempt = mastery.record(lesson, score, total, attempt.missed)
    verdict = (
        "mastered" if attempt.mastered else f"not yet mastered ({mastery.THRESHOLD:.0%} needed)"
    )
    print(f"\n{lesson}: {score}/{total} ({attempt.fraction:.0%}), {verdict}.")
    return attempt


__all__ = ["Question", "assert_correct", "grade", "question", "questions"]
