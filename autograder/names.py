"""What a lesson id (or a student id) a user typed could have meant, when it matches nothing.

nbgrader answers a lesson nobody has submitted (or a typo) with "No notebooks were matched" and a
guessed path; ``attn-grade`` says what it looked for, whether the course has such a lesson, and
which lessons it has, the nearest first.
"""

from __future__ import annotations

import difflib
import fnmatch
import glob
import os
from collections.abc import Iterable
from pathlib import Path

SHOWN = 12  # lessons listed at most; a course has a handful


class LessonProblem(Exception):
    """A command cannot work on the lesson it was given; the message says why, ``status`` is
    the command's exit status."""

    status = 2


class NothingFound(LessonProblem):
    """Nothing matches the lesson (as nbgrader's "No notebooks were matched": status 1)."""

    status = 1


class NotReleased(LessonProblem):
    """The lesson has submissions but no assignment in the gradebook: nbgrader would fail every
    student with "No assignment with ID ... exists in the database"."""


def hint(name: str, known: Iterable[str], what: str) -> str:
    """``"did you mean '02-softmax-masking'? (its lessons: 01-scoring, …)"``.

    ``known`` are the names that exist; ``what`` says what they are. With none, says so.
    """
    names = sorted(set(known))
    if not names:
        return f"there are no {what} yet"
    listed = ", ".join(names[:SHOWN]) + (f", … ({len(names)} in all)" if len(names) > SHOWN else "")
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.7) or [
        other for other in names if name and name.lower() in other.lower()
    ]  # a typo, or a part of the id ("softmax", "02")
    return (
        f"did you mean {close[0]!r}? ({what}: {listed})" if len(close) == 1 else f"{what}: {listed}"
    )


def course_lessons(coursedir) -> set[str]:
    """The lesson ids of nbgrader's ``CourseDirectory``: the folders of its source directory."""
    pattern = coursedir.format_path(coursedir.source_directory, ".", "*")
    return {Path(path).name for path in glob.glob(pattern) if Path(path).is_dir()}


def nothing_matches(coursedir, step: str, lesson: str, waiting: str) -> NothingFound:
    """The error for a ``step/*/LESSON`` (``submitted``, ``autograded``) that matches nothing:
    ``waiting`` ("nobody has submitted it yet") when the course has the lesson, else a hint."""
    pattern = coursedir.format_path(step, "*", lesson)
    lessons = course_lessons(coursedir)
    if lesson in lessons:
        return NothingFound(f"{lesson}: {waiting} (nothing matches {pattern})")
    return NothingFound(
        f"no lesson {lesson!r} in this course (nothing matches {pattern}); "
        + hint(lesson, lessons, "its lessons")
    )


def chosen_students(found: Iterable[str], pattern: str, where: str) -> list[str]:
    """The student folder names of ``found`` that ``pattern`` matches: an id, or a glob as
    nbgrader's ``--student`` takes (``alice``, ``'s0*'``). :class:`NothingFound` if none does,
    saying where it looked (``where``: ``submitted/*/01-scoring``) and which students there are."""
    found = list(found)
    chosen = [name for name in found if fnmatch.fnmatchcase(name, pattern)]
    if not chosen:
        raise NothingFound(
            f"no student {pattern!r} in {where}; " + hint(pattern, found, "its students")
        )
    return chosen


def not_released(lesson: str, known: Iterable[str] | None, where: str) -> NotReleased:
    """The error for submissions of a lesson the gradebook at ``where`` does not have (whose
    lessons are ``known``; None: there is no gradebook there)."""
    release = f"release it first (`nbgrader generate_assignment {lesson}`)"
    if known is None:
        return NotReleased(f"there is no gradebook at {where}: {release}")
    known = list(known)
    return NotReleased(
        f"the gradebook ({where}) has no lesson {lesson!r}: {release}; "
        + (hint(lesson, known, "its lessons") if known else "it has no lesson yet")
    )


def released_notebooks(coursedir, lesson: str) -> list[str]:
    """The names of the lesson's notebooks in the gradebook: those nbgrader grades of a
    submission (it skips any other). Raise :class:`NotReleased` when the gradebook lacks
    the lesson: said once, before any grading, instead of nbgrader failing every student with
    it. A SQLite gradebook that does not exist is not created."""
    from nbgrader.api import Gradebook, MissingEntry

    url = coursedir.db_url
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else None
    known: list[str] | None = None
    if path is None or os.path.exists(path):
        with Gradebook(url, coursedir.course_id) as gb:
            try:
                return [notebook.name for notebook in gb.find_assignment(lesson).notebooks]
            except MissingEntry:
                known = [assignment.name for assignment in gb.assignments]
    raise not_released(lesson, known, path or "the course's db_url")  # it may hold a password
