"""attnlib.lesson while a notebook is graded: where the learner stood, and nothing else.

The course's reference functions are not in the grader's view, so no demonstration can borrow
them: a demonstration that needs an exercise the learner got wrong shows that here.
"""

from __future__ import annotations

from . import mastery


def begin(lesson: str) -> None:
    print(mastery.before_lesson(lesson))
