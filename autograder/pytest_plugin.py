"""pytest plugin: ``pytest --attn-notebook PATH`` runs the hidden checks on a learner's notebook.

For learners who work outside Jupyter, and for forks of the course that grade in their own CI.
Each contract exercise of the notebook's lesson becomes one test, and so does each mastery
question; a failure reads as the diagnosis sentence, not a traceback. Installed with the
project (entry point ``pytest11``), so it needs no ``-p`` flag.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlib import checks, quiz

from .notebook import NotebookError, load


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn", "attention course")
    group.addoption(
        "--attn-notebook",
        action="append",
        default=[],
        metavar="PATH",
        help="check the exercises of a lesson notebook with the course's hidden checks "
        "(may be given more than once); nothing else is collected",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the per-lesson markers, so a run outside this repository knows them too."""
    for lesson in checks.LESSONS:
        config.addinivalue_line("markers", f"lesson{lesson[:2]}: checks for lesson {lesson}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --attn-notebook, the notebook is the whole test run."""
    return True if config.getoption("attn_notebook") else None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for raw in config.getoption("attn_notebook"):
        path = Path(raw)
        try:
            loaded = load(path)
        except NotebookError as error:
            items.append(
                NotebookProblem.from_parent(
                    session, name=path.name, nodeid=str(path), problem=str(error)
                )
            )
            continue
        for exercise in loaded.exercises():
            items.append(
                ExerciseItem.from_parent(
                    session,
                    name=exercise,
                    nodeid=f"{path}::{exercise}",
                    loaded=loaded,
                    exercise=exercise,
                )
            )
        for question in quiz.questions(loaded.lesson):
            items.append(
                QuestionItem.from_parent(
                    session,
                    name=question.key,
                    nodeid=f"{path}::{question.key}",
                    loaded=loaded,
                    key=question.key,
                )
            )


class Diagnosis(Exception):
    """A failed check; pytest shows its sentence and nothing else."""


class _CourseItem(pytest.Item):
    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, Diagnosis):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class ExerciseItem(_CourseItem):
    def __init__(self, *, loaded, exercise, **kwargs):
        super().__init__(**kwargs)
        self.loaded, self.exercise = loaded, exercise
        self.add_marker(getattr(pytest.mark, f"lesson{loaded.lesson[:2]}"))

    def runtest(self):
        fn = self.loaded.namespace.get(self.exercise)
        if fn is None:
            problems = "; ".join(self.loaded.errors) or "no cell defines it"
            raise Diagnosis(f"{self.exercise} is not defined ({problems})")
        outcome = checks.check(self.exercise, fn)
        if not outcome:
            raise Diagnosis(outcome.feedback())


class QuestionItem(_CourseItem):
    def __init__(self, *, loaded, key, **kwargs):
        super().__init__(**kwargs)
        self.loaded, self.key = loaded, key
        self.add_marker(getattr(pytest.mark, f"lesson{loaded.lesson[:2]}"))

    def runtest(self):
        question = quiz.question(self.loaded.lesson, self.key)
        if self.key not in self.loaded.namespace:
            raise Diagnosis(f"{self.key} is not answered yet")
        if not question.accepts(self.loaded.namespace[self.key]):
            raise Diagnosis(f"{self.key}: not right yet. Revisit: {question.topic}.")


class NotebookProblem(_CourseItem):
    def __init__(self, *, problem, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem

    def runtest(self):
        raise Diagnosis(self.problem)
