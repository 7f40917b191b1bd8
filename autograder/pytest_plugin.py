"""pytest plugin: ``pytest --attn-notebook PATH`` runs the hidden checks on a learner's notebook.

For learners who work outside Jupyter, and for forks of the course that grade in their own CI.
Each contract exercise of the notebook's lesson becomes one test, and so does each mastery
question; a failure reads as the diagnosis sentence, not a traceback. The notebook runs through
the grader's own engine (:mod:`autograder.selfcheck`): in a sandbox, never in the pytest process,
with the checks run outside it — so a notebook that patches the checks or ends its process
changes nothing but its own verdicts. Installed with the project (entry point ``pytest11``), so it
needs no ``-p`` flag.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from attnlib import checks, quiz

from .limits import Limits
from .notebook import NotebookError, lesson_of, read

if TYPE_CHECKING:  # the engine is imported when a notebook is checked, not with every pytest
    from .selfcheck import Report


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
    group.addoption(
        "--attn-timeout",
        type=float,
        default=60.0,
        help="seconds per cell and per call of the notebook's code (60)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the per-lesson markers, so a run outside this repository knows them too."""
    for lesson in checks.LESSONS:
        config.addinivalue_line("markers", f"lesson{lesson[:2]}: checks for lesson {lesson}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --attn-notebook, the notebook is the whole test run."""
    return True if config.getoption("attn_notebook") else None


def _checked(path: Path) -> tuple[str, list[str], list[str]]:
    """The lesson of a notebook, its exercises and its mastery questions (NotebookError if none)."""
    lesson = lesson_of(path)
    exercises = [e.name for e in checks.LESSONS[lesson]]
    return lesson, exercises, [q.key for q in quiz.questions(lesson)]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Say what is checked: the notebook's lesson, its exercises and its questions."""
    lines = []
    for raw in config.getoption("attn_notebook"):
        try:
            lesson, exercises, questions = _checked(Path(raw))
        except NotebookError as error:
            lines.append(f"attn-notebook: {raw}: {error}")
            continue
        lines.append(
            f"attn-notebook: {raw} is lesson {lesson}: {len(exercises)} exercises "
            f"({', '.join(exercises)}) and {len(questions)} mastery questions "
            f"({', '.join(questions)}), one test each, checked in one run of the notebook"
        )
    return lines or None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add a test per exercise and question of each --attn-notebook, counted as collected."""
    timeout = config.getoption("attn_timeout")
    for raw in config.getoption("attn_notebook"):
        path = Path(raw)
        try:
            read(path)
            lesson, exercises, questions = _checked(path)
        except NotebookError as error:
            found = [
                NotebookProblem.from_parent(
                    session, name=path.name, nodeid=str(path), problem=str(error)
                )
            ]
        else:
            found = [
                VerdictItem.from_parent(
                    session,
                    name=name,
                    nodeid=f"{path}::{name}",
                    notebook=str(path.resolve()),
                    lesson=lesson,
                    timeout=timeout,
                )
                for name in exercises + questions
            ]
        items.extend(found)
        # Report them as collected, so pytest's "collected N items" counts them (these tests come
        # from the notebook, not from a file pytest walked to).
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(str(path), "passed", None, found)
        )


_REPORTS: dict[tuple[str, float], Report] = {}  # (notebook, timeout) → its check


def _report(notebook: str, timeout: float) -> Report:
    """The check of ``notebook``, run once for all its tests."""
    if (notebook, timeout) not in _REPORTS:
        from .selfcheck import run_check

        limits = Limits(timeout=timeout, budget=max(300.0, 10 * timeout), cpu_seconds=600)
        _REPORTS[notebook, timeout] = run_check(Path(notebook), limits, record=False)
    return _REPORTS[notebook, timeout]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """After the verdicts, what the check noticed running each notebook, as `attn-grade check`
    shows it: course cells it ran whole, cells that raised."""
    for (notebook, _), report in _REPORTS.items():
        remarks = report.remarks()
        if remarks:
            terminalreporter.section(f"attn-notebook: {notebook}")
            for line in remarks[1:]:  # without the blank line before the first part
                terminalreporter.line(line)


class Diagnosis(Exception):
    """A failed check; pytest shows its sentence and nothing else."""


class _CourseItem(pytest.Item):
    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, Diagnosis):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class VerdictItem(_CourseItem):
    """One exercise or mastery question of the notebook: the grader's verdict on it."""

    def __init__(self, *, notebook, lesson, timeout, **kwargs):
        super().__init__(**kwargs)
        self.notebook, self.lesson, self.timeout = notebook, lesson, timeout
        self.add_marker(getattr(pytest.mark, f"lesson{lesson[:2]}"))

    def runtest(self):
        line = _report(self.notebook, self.timeout).line(self.name)
        if line is None:
            raise Diagnosis(f"{self.name} was not checked")
        if not line.passed:
            raise Diagnosis(line.text().removeprefix("✗ "))


class NotebookProblem(_CourseItem):
    def __init__(self, *, problem, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem

    def runtest(self):
        raise Diagnosis(self.problem)
