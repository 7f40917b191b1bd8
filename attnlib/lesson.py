"""What a lesson notebook's first cell sets up.

``lesson.begin("02-softmax-masking")`` prints where the learner stands (the previous lesson's
mastery, :func:`attnlib.mastery.before_lesson`) and lets the lesson's demonstrations run before
the learner's functions do (:mod:`attnlib.checks.follow`): *Run All* reaches the end of an
untouched lesson with every figure drawn, and each exercise's own test cell still shows its
verdict.
"""

from __future__ import annotations

from . import mastery


def begin(lesson: str) -> None:
    """Print the state of the lesson before ``lesson``; let its figures use the course's
    functions until the learner's pass their checks."""
    print(mastery.before_lesson(lesson))
    from .checks import follow

    follow.install(lesson)
