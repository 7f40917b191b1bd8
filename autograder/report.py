"""``attn-grade report``: class analytics for a lesson, from the gradebook and the course history.

Two sources, each for what it alone knows:

* the course's **nbgrader gradebook** (found as ``nbgrader export`` finds it: the course's
  ``nbgrader_config.py`` and nbgrader's config paths, so a ``CourseDirectory.db_url`` pointing at
  PostgreSQL works too) holds every student's current score per graded cell;
* the **course history** (:mod:`autograder.history`) holds every graded notebook — each attempt,
  with its verdicts and their *mistake* keys — which nbgrader forgets at the next grading.

Per lesson it computes four tables:

* **exercises** — per graded cell: the distribution of scores, how many students have full,
  partial and zero points, the mean, and how many have *not attempted* it in their current
  submission (see below);
* **mistakes** — per graded cell and named mistake: how many students make it in their current
  submission, how many ever made it, in how many submissions. A mistake is grouped by its key
  (the diagnosis without one submission's numbers, shapes and quoted text) and shown by its
  *label*: the key with every particular that all those submissions say alike put back, so
  ``must get weight 0`` reads so, where two students' ``weight 0.31`` and ``weight 0.07`` read
  ``weight #``;
* **attempts** — per student and notebook, each distinct submission in turn: when it was last
  graded, how long that took, its mistakes and the course cells set back in it (what a stuck
  student tried; the page shows the stuck students' attempts);
* **students** — total score, mastery (the points of the mastery questions, the cells
  ``test_q*``, at least :data:`attnlib.mastery.THRESHOLD` of their total), attempts (distinct
  submissions), whether they are *stuck*, grading seconds, and the course cells their current
  submission had changed by accident and grading set back (:mod:`autograder.cells`: a copied,
  retyped or deleted cell; tell them to use a fresh copy of the lesson), and, with a due date,
  how late they were, nbgrader's late penalty and the score after it (``nbgrader export``'s),
  and the cells nbgrader has no score for (*not graded*: the autograder could not grade the
  notebook; see :func:`scores_of`), with the error the batch gave.
  The scores everywhere else are the points the answers earned, before any penalty: what the
  class learned, not what it was docked.

**Stuck**: a student is stuck when the same named mistake, on the same graded cell, is in each of
their last :data:`STUCK_AFTER` distinct submissions of a notebook (a regrade of an unchanged
submission is not a new attempt). Submissions are ordered by when each was last graded.

**Not attempted**: the verdict on work not begun — an exercise that still raises
``NotImplementedError``, a mastery question not answered (:func:`not_begun`). A learner who works
through a lesson over several sessions and submits after each has the later exercises unwritten
every time: that is progress, not a misconception. Such verdicts are counted per exercise as
*not attempted*. They stay in the mistakes table of the JSON and CSV (flagged, after the named
mistakes) and in a student's current mistakes, but never make a student stuck, never lead an
exercise's mistakes, and are left out of the page's table and plot of named mistakes.

Output: a text summary, JSON, one CSV per table, and a self-contained HTML page (inline CSS,
plots as inline PNG drawn with matplotlib's Agg canvas; no script, font or image is fetched).
Everything a learner could have shaped — student ids are folder names, a diagnosis may quote an
exception's text — is escaped in the HTML, drawn as plain text in the plots, and kept from being
read as a formula in the CSV files.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlib.checks import NOT_WRITTEN
from attnlib.mastery import THRESHOLD
from attnlib.quiz import NOT_ANSWERED

from . import history, names, spreadsheet
from .submission import shown

STUCK_AFTER = 3  # the same mistake in this many last distinct submissions
MASTERY_CELL = re.compile(r"^test_q\d+$")
EPS = 1e-9
# How the mistake keys of work not begun start: "not written yet:", "not answered yet:".
NOT_BEGUN = tuple(history.mistake_key(t).split(":")[0] + ":" for t in (NOT_WRITTEN, NOT_ANSWERED))


def not_begun(mistake: str) -> bool:
    """Whether a mistake key is the verdict on work not begun (see the module doc)."""
    return mistake.startswith(NOT_BEGUN)


# ---------------------------------------------------------------------------------------------
# what the report holds


@dataclass
class Cell:
    """A graded cell of a lesson, as the gradebook records it."""

    key: str  # the grade id; "notebook/grade id" when the lesson has several notebooks
    notebook: str
    name: str
    max_score: float
    mastery: bool
    checks: list[str] = field(default_factory=list)  # the hidden checks it calls


@dataclass
class Attempt:
    """One distinct submission of one notebook, with the verdicts of its latest grading."""

    student: str
    notebook: str
    submission: str
    at: float
    seconds: float
    said: dict[tuple[str, str], str]  # (cell key, mistake) → the diagnosis that named it
    repaired: list[str] = field(default_factory=list)  # course cells set back (autograder.cells)

    @property
    def mistakes(self) -> set[tuple[str, str]]:
        """(cell key, mistake) of each failed verdict."""
        return set(self.said)


@dataclass
class ExerciseStats:
    lesson: str
    exercise: str
    notebook: str
    max_score: float
    mastery: bool
    students: int
    full: int
    partial: int
    zero: int
    mean: float | None
    distribution: dict[str, int]  # score (as text, "1.5") → students
    not_attempted: int = 0  # students whose current submission has not begun it (among zero)


@dataclass
class MistakeStats:
    lesson: str
    exercise: str
    mistake: str  # the key: the diagnosis without one submission's particulars (history)
    label: str  # the key as the class's diagnoses word it (history.mistake_label)
    students_now: int  # students whose current submission makes it
    students_ever: int  # students who made it in any submission
    submissions: int  # distinct submissions that made it
    not_attempted: bool = False  # the verdict on work not begun, not a mistake (not_begun)


@dataclass
class StudentStats:
    lesson: str
    student: str
    score: float | None
    max_score: float
    cells: dict[str, float]  # cell key → score, from the gradebook
    mastery_score: float
    mastery_max: float
    mastered: bool | None  # None: the lesson has no mastery questions, or no grade
    attempts: int
    stuck: bool
    stuck_on: list[str]  # "cell: mistake" (the mistake's label, as everywhere a student is named)
    mistakes_now: list[str]  # "cell: mistake", from the current submission
    seconds: float | None  # grading time of the current submission(s)
    seconds_total: float  # grading time of every recorded grading
    set_back: list[str] = field(default_factory=list)  # course cells the current one changed
    # after the due date (and the student's extension), and nbgrader's penalty for it; the
    # score less the penalty, at least 0, is the grade ``nbgrader export`` gives
    seconds_late: float = 0.0
    late_submission_penalty: float = 0.0
    score_after_penalty: float | None = None
    # cells nbgrader has no score for (see scores_of), and why, as the batch said it
    not_graded: list[str] = field(default_factory=list)
    not_graded_why: str = ""


@dataclass
class AttemptStats:
    lesson: str
    student: str
    notebook: str
    attempt: int  # 1: the student's first distinct submission of the notebook
    graded: str  # when it was last graded, UTC ("2026-11-29 16:23:38")
    seconds: float  # how long that grading took
    mistakes: list[str]  # "cell: mistake" in that submission (work not begun included)
    set_back: list[str] = field(default_factory=list)  # course cells grading set back in it


@dataclass
class LessonReport:
    lesson: str
    cells: list[Cell]
    exercises: list[ExerciseStats]
    mistakes: list[MistakeStats]
    students: list[StudentStats]
    stuck_after: int = STUCK_AFTER
    attempts: list[AttemptStats] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "lesson": self.lesson,
            "stuck_after": self.stuck_after,
            "summary": summary(self),
            "exercises": [asdict(e) for e in self.exercises],
            "mistakes": [asdict(m) for m in self.mistakes],
            "students": [asdict(s) for s in self.students],
            "attempts": [asdict(a) for a in self.attempts],
        }


class ReportError(Exception):
    """The course cannot be reported on (no gradebook, unknown lesson); the message says why."""


# ---------------------------------------------------------------------------------------------
# the gradebook


@contextlib.contextmanager
def inside(course: Path):
    """Work in the course directory, as nbgrader does (its config and relative paths)."""
    here = os.getcwd()
    os.chdir(course)
    try:
        yield
    finally:
        os.chdir(here)


def course_directory():
    """The course's nbgrader ``CourseDirectory``, configured as nbgrader's own apps load it
    (run inside the course directory). The app is the report's own, not the process's nbgrader
    singleton, which another app may hold."""
    from nbgrader.apps.exportapp import ExportApp

    app = ExportApp()
    app.initialize(["--log-level=ERROR"])
    return app.coursedir


def open_gradebook(coursedir):
    """nbgrader's ``Gradebook`` of the course; a SQLite gradebook that does not exist is an
    error here (nbgrader would create an empty one)."""
    from nbgrader.api import Gradebook

    url = coursedir.db_url
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        raise ReportError(f"no gradebook at {url[len('sqlite:///') :]}: nothing is graded yet")
    return Gradebook(url, coursedir.course_id)


def graded_lessons(gb) -> list[str]:
    """Every lesson with a submission in the gradebook."""
    return sorted(a.name for a in gb.assignments if a.submissions)


def cells_of(gb, lesson: str, order: dict[str, list[str]]) -> list[Cell]:
    """The lesson's graded cells, in notebook order (``order``: notebook → grade ids)."""
    from .scoring import hidden_calls

    assignment = gb.find_assignment(lesson)
    several = len(assignment.notebooks) > 1
    sources = {
        (nb.name, source.name): source.source or ""
        for nb in assignment.notebooks
        for source in nb.source_cells
    }
    cells = []
    for nb in sorted(assignment.notebooks, key=lambda n: n.name):
        known = order.get(nb.name, [])
        ranked = sorted(
            nb.grade_cells,
            key=lambda g: (known.index(g.name) if g.name in known else len(known), g.name),
        )
        for grade_cell in ranked:
            source = sources.get((nb.name, grade_cell.name), "")
            calls = hidden_calls(0, source, reports=True)
            cells.append(
                Cell(
                    key=f"{nb.name}/{grade_cell.name}" if several else grade_cell.name,
                    notebook=nb.name,
                    name=grade_cell.name,
                    max_score=float(grade_cell.max_score),
                    mastery=is_mastery(grade_cell.name, calls),
                    checks=list(dict.fromkeys(call.name for call in calls)),
                )
            )
    return cells


def is_mastery(name: str, calls) -> bool:
    """A mastery question: a cell ``test_q<n>``, or one whose hidden checks are all answers."""
    return bool(MASTERY_CELL.match(name)) or bool(calls) and all(c.kind == "answer" for c in calls)


def source_order(coursedir, lesson: str) -> dict[str, list[str]]:
    """notebook → its grade ids in the order of the course's source notebook (if readable)."""
    import nbformat

    folder = Path(coursedir.format_path(coursedir.source_directory, ".", lesson))
    order = {}
    for path in sorted(folder.glob("*.ipynb")):
        with contextlib.suppress(Exception):
            nb = nbformat.read(path, as_version=4)
            order[path.stem] = [
                c.metadata["nbgrader"]["grade_id"]
                for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade")
            ]
    return order


def scores_of(gb, lesson: str, cells: list[Cell]):
    """``(scores, unscored)`` for every student with a submission of ``lesson``: student → cell
    key → score, and student → the cell keys that nbgrader has no score for (the autograder could
    not grade the notebook, and nobody has graded it by hand: nbgrader counts such a cell as 0
    and formgrader shows it as needing a manual grade). A student with no score at all is left
    out of ``scores``: not graded, where a 0 would read as a wrong answer."""
    keys = {(c.notebook, c.name): c.key for c in cells}
    scores: dict[str, dict[str, float]] = {}
    unscored: dict[str, list[str]] = {}
    for submitted in gb.find_assignment(lesson).submissions:
        student = submitted.student.id
        for nb in submitted.notebooks:
            for grade in nb.grades:
                key = keys.get((nb.name, grade.name))
                if key is None:
                    continue
                if grade.auto_score is None and grade.manual_score is None:
                    unscored.setdefault(student, []).append(key)
                else:
                    scores.setdefault(student, {})[key] = float(grade.score or 0.0)
    return scores, unscored


def lateness_of(gb, lesson: str) -> dict[str, tuple[float, float]]:
    """student → (seconds late, nbgrader's late penalty), for every student with a submission
    of ``lesson`` (see :class:`StudentStats`)."""
    out = {}
    for submitted in gb.find_assignment(lesson).submissions:
        try:
            late = float(submitted.total_seconds_late or 0.0)
        except TypeError:  # nbgrader's sum of no due date and an extension: not late
            late = 0.0
        out[submitted.student.id] = (late, float(submitted.late_submission_penalty or 0.0))
    return out


# ---------------------------------------------------------------------------------------------
# the history


def attempts_of(entries, cells: list[Cell]) -> dict[str, list[Attempt]]:
    """student → distinct submissions, each with its latest grading, oldest first."""
    latest: dict[tuple[str, str, str], dict] = {}
    for entry in entries:  # oldest first: a later grading of a submission replaces an earlier
        who = (str(entry.get("student")), str(entry.get("notebook")), str(entry.get("submission")))
        latest.pop(who, None)
        latest[who] = entry
    checks = cell_of_check(cells)
    out: dict[str, list[Attempt]] = defaultdict(list)
    for (student, notebook, submission), entry in latest.items():
        out[student].append(
            Attempt(
                student=student,
                notebook=notebook,
                submission=submission,
                at=float(entry.get("at") or 0.0),
                seconds=float(entry.get("seconds") or 0.0),
                said=mistakes_in(entry, notebook, checks),
                repaired=[str(n) for n in entry.get("repaired") or [] if isinstance(n, str)],
            )
        )
    return dict(out)


def cell_of_check(cells: list[Cell]) -> dict[tuple[str, str], str]:
    """(notebook, check name) → the key of the graded cell that calls it; (notebook, "#" +
    grade id) → that cell's key, for verdicts that name their cell."""
    out = {(cell.notebook, "#" + cell.name): cell.key for cell in cells}
    for cell in cells:
        for name in cell.checks:
            out.setdefault((cell.notebook, name), cell.key)
    for cell in cells:  # a check its cell does not name: the course's convention, test_<name>
        out.setdefault((cell.notebook, cell.name.removeprefix("test_")), cell.key)
    return out


def mistakes_in(entry: dict, notebook: str, checks: dict) -> dict[tuple[str, str], str]:
    """The (cell key, mistake) pairs of one graded notebook's failed verdicts, each with the
    diagnosis that named it."""
    found = {}
    for verdict in entry.get("verdicts", []):
        mistake = verdict.get("mistake") or ""
        if verdict.get("passed") or not mistake:
            continue
        name, grade_id = str(verdict.get("name")), verdict.get("grade_id")
        cell = checks.get((notebook, "#" + grade_id)) if grade_id else None
        pair = (cell or checks.get((notebook, name), f"test_{name}"), str(mistake))
        found[pair] = str(verdict.get("message") or mistake)
    return found


def labels_of(attempts: dict[str, list[Attempt]]) -> dict[tuple[str, str], str]:
    """(cell key, mistake) → its label: the key with every particular that all the
    submissions making it say alike put back (:func:`history.mistake_label`)."""
    said: dict[tuple[str, str], list[str]] = defaultdict(list)
    for student_attempts in attempts.values():
        for attempt in student_attempts:
            for pair, message in attempt.said.items():
                said[pair].append(message)
    return {pair: history.mistake_label(messages) for pair, messages in said.items()}


def listed(pairs, labels: dict[tuple[str, str], str]) -> list[str]:
    """``"cell: mistake"`` for each pair, in order, the mistake by its label."""
    return [f"{cell}: {labels.get((cell, mistake), mistake)}" for cell, mistake in sorted(pairs)]


def stuck_on(attempts: list[Attempt], after: int = STUCK_AFTER) -> list[tuple[str, str]]:
    """The mistakes in each of the last ``after`` distinct submissions of one notebook."""
    if after < 1 or len(attempts) < after:
        return []
    last = attempts[-after:]
    return sorted(pair for pair in set.intersection(*(a.mistakes for a in last))
                  if not not_begun(pair[1]))  # fmt: skip


def current(attempts: list[Attempt]) -> set[tuple[str, str]]:
    """One student's (cell key, mistake) pairs in the current submission of each notebook."""
    return set().union(*(a[-1].mistakes for a in by_notebook(attempts).values()))


def by_notebook(attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    out: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        out[attempt.notebook].append(attempt)
    return out


# ---------------------------------------------------------------------------------------------
# the tables


def exercise_stats(
    lesson: str, cell: Cell, scores: dict[str, dict[str, float]], not_attempted: int = 0
) -> ExerciseStats:
    """The score distribution of one graded cell over the students who have a grade for it;
    ``not_attempted`` of them have not begun it (:func:`unbegun_by_cell`)."""
    got = [grades[cell.key] for grades in scores.values() if cell.key in grades]
    full = sum(s >= cell.max_score - EPS for s in got)
    zero = sum(s <= EPS for s in got)
    counts = Counter(got)
    return ExerciseStats(
        lesson=lesson,
        exercise=cell.key,
        notebook=cell.notebook,
        max_score=cell.max_score,
        mastery=cell.mastery,
        students=len(got),
        full=full,
        partial=len(got) - full - zero,
        zero=zero,
        mean=round(sum(got) / len(got), 4) if got else None,
        distribution={f"{score:g}": counts[score] for score in sorted(counts)},
        not_attempted=not_attempted,
    )


def unbegun_by_cell(attempts: dict[str, list[Attempt]]) -> Counter:
    """Cell key → students whose current submission has not begun it."""
    return Counter(
        cell
        for student_attempts in attempts.values()
        for cell in {cell for cell, mistake in current(student_attempts) if not_begun(mistake)}
    )


def mistake_stats(
    lesson: str, attempts: dict[str, list[Attempt]], labels: dict | None = None
) -> list[MistakeStats]:
    """Per (cell, mistake): its label (:func:`labels_of`), students making it now, students who
    ever made it, submissions."""
    labels = labels_of(attempts) if labels is None else labels
    now, ever, submissions = Counter(), Counter(), Counter()
    for student_attempts in attempts.values():
        now.update(current(student_attempts))
        ever.update(set().union(*(a.mistakes for a in student_attempts)))
        for attempt in student_attempts:
            submissions.update(attempt.mistakes)
    rows = [
        MistakeStats(lesson, cell, mistake, labels.get((cell, mistake), mistake),
                     now[(cell, mistake)], ever[(cell, mistake)], submissions[(cell, mistake)],
                     not_begun(mistake))
        for cell, mistake in ever
    ]  # fmt: skip
    return sorted(rows, key=lambda m: (m.not_attempted, -m.students_now, -m.students_ever,
                                       m.exercise, m.mistake))  # fmt: skip


def named(report: LessonReport, exercise: str | None = None) -> list[MistakeStats]:
    """The lesson's named mistakes (work not begun left out), of one exercise if given."""
    return [m for m in report.mistakes
            if not m.not_attempted and exercise in (None, m.exercise)]  # fmt: skip


def student_stats(
    lesson,
    student,
    cells,
    grades,
    attempts,
    after=STUCK_AFTER,
    late=(0.0, 0.0),
    labels=None,
    unscored=(),
    why="",
) -> StudentStats:
    """One student's row: score, mastery, attempts, stuck, grading time, lateness (mistakes by
    their ``labels``, :func:`labels_of`), the cells nbgrader has no score for and ``why``."""
    labels = labels or {}
    graded = bool(grades)
    grades = grades or {}
    score = round(sum(grades.values()), 6) if graded else None
    mastery_cells = [c for c in cells if c.mastery]
    mastery_score = sum(grades.get(c.key, 0.0) for c in mastery_cells)
    mastery_max = sum(c.max_score for c in mastery_cells)
    notebooks = by_notebook(attempts)
    stuck = sorted({pair for a in notebooks.values() for pair in stuck_on(a, after)})
    return StudentStats(
        lesson=lesson,
        student=student,
        score=score,
        max_score=sum(c.max_score for c in cells),
        cells={c.key: grades[c.key] for c in cells if c.key in grades},
        mastery_score=mastery_score,
        mastery_max=mastery_max,
        mastered=mastered(mastery_score, mastery_max) if graded else None,
        attempts=max((len(a) for a in notebooks.values()), default=0),
        stuck=bool(stuck),
        stuck_on=listed(stuck, labels),
        mistakes_now=listed(current(attempts), labels),
        seconds=round(sum(a[-1].seconds for a in notebooks.values()), 3) if notebooks else None,
        seconds_total=round(sum(a.seconds for a in attempts), 3),
        set_back=[note for a in notebooks.values() for note in a[-1].repaired],
        seconds_late=late[0],
        late_submission_penalty=late[1],
        score_after_penalty=max(0.0, round(score - late[1], 6)) if graded else None,
        not_graded=list(unscored),
        not_graded_why=why if unscored else "",
    )


def why_not_graded(course: Path, lesson: str) -> dict[str, str]:
    """student → the error the last ``attn-grade batch`` of ``lesson`` gave them (the journal's)."""
    from .journal import journal_entries

    return {student: str(entry.get("error") or "")
            for student, entry in journal_entries(course, lesson).items()
            if entry.get("status") in ("error", "refused")}  # fmt: skip


def attempt_stats(
    lesson: str, attempts: dict[str, list[Attempt]], labels: dict | None = None
) -> list[AttemptStats]:
    """Every student's distinct submissions of each notebook, in turn (see :class:`Attempt`)."""
    labels = labels_of(attempts) if labels is None else labels
    return [
        AttemptStats(
            lesson=lesson,
            student=student,
            notebook=notebook,
            attempt=n,
            graded=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(a.at)),
            seconds=round(a.seconds, 3),
            mistakes=listed(a.mistakes, labels),
            set_back=list(a.repaired),
        )
        for student in sorted(attempts)
        for notebook, theirs in by_notebook(attempts[student]).items()
        for n, a in enumerate(theirs, 1)
    ]


def mastered(score: float, total: float) -> bool | None:
    """Mastery reached: at least THRESHOLD of the mastery questions' points (None: no questions)."""
    if total <= 0:
        return None
    return score >= THRESHOLD * total - EPS


def lesson_report(gb, course: Path, coursedir, lesson: str, after=STUCK_AFTER) -> LessonReport:
    """Every table of one lesson."""
    from nbgrader.api import MissingEntry

    try:
        gb.find_assignment(lesson)
    except MissingEntry as error:
        known = names.hint(lesson, (a.name for a in gb.assignments), "its lessons")
        raise ReportError(f"the gradebook has no lesson {lesson!r}; {known}") from error
    cells = cells_of(gb, lesson, source_order(coursedir, lesson))
    scores, unscored = scores_of(gb, lesson, cells)
    late = lateness_of(gb, lesson)
    attempts = attempts_of(history.entries(course, lesson), cells)
    students = sorted(set(scores) | set(unscored) | set(attempts))
    why = why_not_graded(course, lesson)
    unbegun = unbegun_by_cell(attempts)
    labels = labels_of(attempts)
    return LessonReport(
        lesson=lesson,
        cells=cells,
        exercises=[exercise_stats(lesson, cell, scores, unbegun[cell.key]) for cell in cells],
        mistakes=mistake_stats(lesson, attempts, labels),
        students=[
            student_stats(
                lesson,
                s,
                cells,
                scores.get(s),
                attempts.get(s, []),
                after,
                late=late.get(s, (0.0, 0.0)),
                labels=labels,
                unscored=unscored.get(s, []),
                why=why.get(shown(s), ""),
            )  # fmt: skip
            for s in students
        ],
        stuck_after=after,
        attempts=attempt_stats(lesson, attempts, labels),
    )


def build(course: Path, lessons: list[str] | None, after: int = STUCK_AFTER):
    """``(course id, [LessonReport])`` for ``lessons`` (None: every graded lesson)."""
    course = Path(course).resolve()
    with inside(course):
        coursedir = course_directory()
        with open_gradebook(coursedir) as gb:
            lessons = graded_lessons(gb) if lessons is None else lessons
            reports = [lesson_report(gb, course, coursedir, lesson, after) for lesson in lessons]
    return coursedir.course_id, reports


def summary(report: LessonReport) -> dict:
    """The lesson in a few numbers."""
    graded = [s for s in report.students if s.score is not None]
    return {
        "students": len(report.students),
        "graded": len(graded),
        "max_score": sum(c.max_score for c in report.cells),
        "mean_score": round(sum(s.score for s in graded) / len(graded), 4) if graded else None,
        "mastered": sum(s.mastered is True for s in report.students),
        "stuck": sum(s.stuck for s in report.students),
        "set_back": sum(bool(s.set_back) for s in report.students),
        "late": sum(s.seconds_late > 0 for s in report.students),
        "not_graded": sum(bool(s.not_graded) for s in report.students),
    }


# ---------------------------------------------------------------------------------------------
# text, JSON, CSV


def text_summary(reports: list[LessonReport]) -> str:
    """A few lines per lesson for the terminal."""
    lines = []
    for report in reports:
        s = summary(report)
        mean = "–" if s["mean_score"] is None else f"{s['mean_score']:g}"
        late = f", {s['late']} late" if s["late"] else ""
        lines.append(
            f"{report.lesson}: {s['students']} students, mean {mean}/{s['max_score']:g}, "
            f"{s['mastered']} mastered, {s['stuck']} stuck{late}"
        )
        rows = [("exercise", "max", "full", "partial", "zero", "not attempted",
                 "top mistake now")]  # fmt: skip
        for e in report.exercises:
            top = [m for m in named(report, e.exercise) if m.students_now]
            note = f"{_label(top[0].label, 60)} ({top[0].students_now})" if top else ""
            rows.append((e.exercise, f"{e.max_score:g}", str(e.full), str(e.partial),
                         str(e.zero), str(e.not_attempted), note))  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for row in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
                         + "  " + row[6])  # fmt: skip
        for student in report.students:
            if student.stuck:
                lines.append(f"  stuck: {student.student} ({'; '.join(student.stuck_on)[:100]})")
            if student.set_back:
                lines.append(f"  course cells set back: {student.student} "
                             f"({'; '.join(student.set_back)[:100]})")  # fmt: skip
            if student.not_graded:
                lines.append(f"  not graded: {student.student} ({not_graded(student)[:100]})")
        lines.append("")
    return "\n".join(lines).rstrip()


def not_graded(s: StudentStats) -> str:
    """Which of a student's cells nbgrader has no score for, and why (see :func:`scores_of`)."""
    which = ", ".join(s.not_graded) if s.cells else "any cell"
    why = s.not_graded_why or ("the autograder could not grade it: grade it by hand in "
                               "formgrader, or grade the student again")  # fmt: skip
    return f"no score for {which}: {why}"


def as_json(course_id: str, reports: list[LessonReport]) -> str:
    payload = {
        "course_id": course_id,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mastery_threshold": THRESHOLD,
        "lessons": [r.as_dict() for r in reports],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _csv_value(value: object) -> object:
    if isinstance(value, dict):
        value = "; ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in value.items())  # fmt: skip
    elif isinstance(value, list):
        value = "; ".join(map(str, value))
    return value


def write_csv(reports: list[LessonReport], folder: Path) -> list[Path]:
    """``exercises.csv``, ``mistakes.csv``, ``students.csv``, ``attempts.csv`` in ``folder``
    (every lesson)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tables = {
        "exercises": ([asdict(e) for r in reports for e in r.exercises], ExerciseStats),
        "mistakes": ([asdict(m) for r in reports for m in r.mistakes], MistakeStats),
        "students": ([asdict(s) for r in reports for s in r.students], StudentStats),
        "attempts": ([asdict(a) for r in reports for a in r.attempts], AttemptStats),
    }
    written = []
    for name, (rows, kind) in tables.items():
        path = folder / f"{name}.csv"
        columns = list(kind.__dataclass_fields__)
        spreadsheet.write(path, columns, ([_csv_value(row[c]) for c in columns] for row in rows))
        written.append(path)
    return written


# ---------------------------------------------------------------------------------------------
# plots (matplotlib's Agg canvas, no pyplot state) as inline PNG


COLOURS = {"full": "#2b8a3e", "partial": "#f08c00", "zero": "#c92a2a",
           "not attempted": "#adb5bd", "now": "#1c7ed6", "ever": "#a5d8ff",
           "bar": "#5f3dc4"}  # fmt: skip


def png(figure) -> str:
    """A matplotlib figure as a ``data:`` URL."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _label(text: str, limit: int = 48) -> str:
    text = re.sub(r"\s+", " ", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plot_exercises(report: LessonReport) -> str:
    """Students with full, partial and zero points, per exercise (stacked bars); of zero, those
    who have not attempted it apart."""
    from matplotlib.figure import Figure

    rows = report.exercises[::-1]
    figure = Figure(figsize=(7.5, 0.8 + 0.32 * max(1, len(rows))))
    ax = figure.add_subplot()
    left = [0] * len(rows)
    unbegun = [min(e.not_attempted, e.zero) for e in rows]
    parts = {
        "full": [e.full for e in rows],
        "partial": [e.partial for e in rows],
        "zero": [e.zero - n for e, n in zip(rows, unbegun, strict=True)],
        "not attempted": unbegun,
    }
    for part, values in parts.items():
        ax.barh(range(len(rows)), values, left=left, color=COLOURS[part], label=part)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(rows)), [_label(e.exercise) for e in rows], parse_math=False)
    ax.set_xlabel("students")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Points per exercise")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return png(figure)


def plot_totals(report: LessonReport) -> str:
    """How many students have each total score."""
    from matplotlib.figure import Figure

    counts = Counter(s.score for s in report.students if s.score is not None)
    figure = Figure(figsize=(7.5, 3))
    ax = figure.add_subplot()
    ax.bar(list(counts), list(counts.values()), width=0.8, color=COLOURS["bar"])
    most = sum(c.max_score for c in report.cells)
    ax.set_xlim(-0.8, most + 0.8)
    ax.set_xlabel(f"total score (of {most:g})")
    ax.set_ylabel("students")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Total scores")
    return png(figure)


def plot_mistakes(report: LessonReport, top: int = 12) -> str | None:
    """The most common named mistakes (work not begun left out): students making each now, and
    ever."""
    from matplotlib.figure import Figure

    rows = named(report)[:top][::-1]
    if not rows:
        return None
    figure = Figure(figsize=(7.5, 0.9 + 0.34 * len(rows)))
    ax = figure.add_subplot()
    ever = [m.students_ever for m in rows]
    now = [m.students_now for m in rows]
    ax.barh(range(len(rows)), ever, color=COLOURS["ever"], label="ever")
    ax.barh(range(len(rows)), now, height=0.5, color=COLOURS["now"], label="now")
    labels = [_label(f"{m.exercise}: {m.label}", 60) for m in rows]
    ax.set_yticks(range(len(rows)), labels, parse_math=False, fontsize="small")
    ax.set_xlabel("students")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Named mistakes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return png(figure)


# ---------------------------------------------------------------------------------------------
# the HTML page


CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:70rem;padding:0 1rem;color:#212529}
h1{font-size:1.6rem}h2{border-bottom:2px solid #dee2e6;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.5rem 0 1rem}th,td{border:1px solid #dee2e6;
padding:.25rem .6rem;text-align:left;vertical-align:top}th{background:#f1f3f5}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.late{white-space:nowrap}
.summary{display:flex;gap:1.5rem;flex-wrap:wrap}.summary div{background:#f8f9fa;
border-radius:.4rem;padding:.5rem 1rem}.summary b{display:block;font-size:1.4rem}
.exercises{display:grid;grid-template-columns:repeat(auto-fill,minmax(20rem,1fr));gap:0 1.5rem}
.yes{color:#2b8a3e}.no{color:#c92a2a}.stuck{background:#fff3bf}img{max-width:100%}
code{font-size:.9em;background:#f1f3f5;padding:0 .2em;border-radius:.2em}
"""


def esc(value: object) -> str:
    """Text for HTML: markup, quotes and all escaped."""
    return html.escape(str(value), quote=True)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def _mean(value: float | None) -> str:
    return "–" if value is None else f"{round(value, 2):g}"


def _table(header: list[str], rows: list[str], cls: str = "", attrs: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    klass = f' class="{cls}"' if cls else ""
    body = "".join(rows)
    return f"<table{klass}{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_summary(report: LessonReport) -> str:
    s = summary(report)
    items = [
        ("students", s["students"]),
        ("mean score", f"{_mean(s['mean_score'])} / {s['max_score']:g}"),
        ("mastered", s["mastered"]),
        ("stuck", s["stuck"]),
        *([("late", s["late"])] if s["late"] else []),
        *([("not graded", s["not_graded"])] if s["not_graded"] else []),
    ]
    cells = "".join(f'<div data-stat="{esc(k)}"><b>{esc(v)}</b>{esc(k)}</div>' for k, v in items)
    return f'<div class="summary">{cells}</div>'


def html_students(report: LessonReport) -> str:
    from .batch import lateness

    late = summary(report)["late"] > 0  # a column of its own only then, as in the batch's table
    unscored = summary(report)["not_graded"] > 0  # the same
    rows = []
    for s in report.students:
        mastery = {True: '<span class="yes">yes</span>', False: '<span class="no">no</span>',
                   None: "–"}[s.mastered]  # fmt: skip
        klass = ' class="stuck"' if s.stuck else ""
        rows.append(
            f'<tr{klass} data-student="{esc(s.student)}"><td>{esc(s.student)}</td>'
            f'<td class="num score">{_num(s.score)}</td>'
            + (f'<td class="num late">{esc(lateness(s))}</td>' if late else "")
            + f'<td class="num">{s.mastery_score:g} / {s.mastery_max:g}</td>'
            f'<td class="mastered">{mastery}</td><td class="num attempts">{s.attempts}</td>'
            f'<td class="num">{_num(s.seconds)}</td>{_why_talk(s, unscored)}</tr>'
        )
    most = summary(report)["max_score"]
    stuck = f"stuck (same mistake {report.stuck_after}×)"
    header = ["student", f"score (of {most:g})", *(["late (penalty)"] if late else []),
              "mastery questions", "mastered", "attempts", "grading s", stuck,
              "course cells set back", *(["not graded"] if unscored else [])]  # fmt: skip
    return _table(header, rows, "students")


def _why_talk(s: StudentStats, unscored: bool = False) -> str:
    """A student's cells of what a conversation is about: the mistakes they are stuck on, the
    course cells their current submission had set back and (with ``unscored``) what nbgrader
    has no score for."""
    stuck = "<br>".join(f"<code>{esc(x)}</code>" for x in s.stuck_on) if s.stuck else ""
    set_back = "<br>".join(esc(x) for x in s.set_back)
    cells = f'<td class="stuck-on">{stuck}</td><td class="set-back">{set_back}</td>'
    if unscored:
        cells += f'<td class="not-graded">{esc(not_graded(s)) if s.not_graded else ""}</td>'
    return cells


def html_to_talk_to(report: LessonReport) -> str:
    """The students a conversation helps more than another attempt: the stuck, those whose
    current submission had course cells set back (they are best told to use a fresh copy of the
    lesson), and those nbgrader has no score for. A short table however large the class, above
    the table of every student."""
    unscored = summary(report)["not_graded"] > 0
    rows = []
    for s in report.students:
        if not (s.stuck or s.set_back or s.not_graded):
            continue
        rows.append(
            f'<tr data-student="{esc(s.student)}"><td>{esc(s.student)}</td>'
            f'<td class="num score">{_num(s.score)}</td><td class="num">{s.attempts}</td>'
            f"{_why_talk(s, unscored)}</tr>"
        )
    if not rows:
        return "<p>Nobody is stuck, and no current submission had course cells set back.</p>"
    most = summary(report)["max_score"]
    stuck = f"stuck on (the same mistake {report.stuck_after}×)"
    header = ["student", f"score (of {most:g})", "attempts", stuck, "course cells set back",
              *(["not graded"] if unscored else [])]  # fmt: skip
    return _table(header, rows, "talk") + html_stuck_attempts(report)


def html_stuck_attempts(report: LessonReport) -> str:
    """Each stuck student's submissions in turn, with the named mistakes of each: what they
    tried, for whoever helps them."""
    stuck = {s.student for s in report.students if s.stuck}
    rows = []
    for a in report.attempts:
        if a.student not in stuck:
            continue
        named_ = [m for m in a.mistakes if not not_begun(m.split(": ", 1)[-1])]
        listed = "<br>".join(f"<code>{esc(m)}</code>" for m in named_) or "no named mistake"
        rows.append(
            f'<tr data-student="{esc(a.student)}"><td>{esc(a.student)}</td>'
            f'<td>{esc(a.notebook)}</td><td class="num">{a.attempt}</td>'
            f'<td>{esc(a.graded)} UTC</td><td class="mistakes">{listed}</td></tr>'
        )
    if not rows:
        return ""
    header = ["student", "notebook", "attempt", "graded", "named mistakes"]
    return "<h4>Stuck students, attempt by attempt</h4>" + _table(header, rows, "attempts")


def html_exercise(report: LessonReport, e: ExerciseStats) -> str:
    rows = [
        f'<tr data-score="{esc(score)}"><td class="num">{esc(score)}</td>'
        f'<td class="num">{count}</td></tr>'
        for score, count in e.distribution.items()
    ]
    table = _table(["score", "students"], rows, "exercise-table",
                   f' data-exercise="{esc(e.exercise)}"')  # fmt: skip
    listed = "".join(
        f"<li><code>{esc(m.label)}</code>: {m.students_now} now, {m.students_ever} ever</li>"
        for m in named(report, e.exercise)
    )
    tag = " · mastery question" if e.mastery else ""
    points = f"{e.max_score:g} point{'' if e.max_score == 1 else 's'}"
    unbegun = f' (<span class="not-attempted">{e.not_attempted}</span> not attempted)'
    return (
        f'<section class="exercise"><h3>{esc(e.exercise)}</h3>'
        f"<p>{points}{tag} · full {e.full}, partial {e.partial}, zero {e.zero}"
        f"{unbegun if e.not_attempted else ''} · mean {_mean(e.mean)}</p>{table}"
        + (f"<ul>{listed}</ul>" if listed else "<p>No named mistake.</p>")
        + "</section>"
    )


def html_mistakes(report: LessonReport) -> str:
    rows = [
        f"<tr><td>{esc(m.exercise)}</td><td><code>{esc(m.label)}</code></td>"
        f'<td class="num">{m.students_now}</td><td class="num">{m.students_ever}</td>'
        f'<td class="num">{m.submissions}</td></tr>'
        for m in named(report)
    ]
    if not rows:
        return "<p>No named mistake in any submission.</p>"
    header = ["exercise", "mistake", "students now", "students ever", "submissions"]
    return _table(header, rows, "mistakes")


def html_plot(url: str | None, alt: str) -> str:
    return f'<p><img class="plot" src="{url}" alt="{esc(alt)}"></p>' if url else ""


PARTS = (  # a lesson's parts on the page, in order: (anchor suffix, heading)
    ("mistakes", "Named mistakes"),
    ("talk", "Students to talk to"),
    ("exercises", "Exercises"),
    ("students", "All students"),
)


def anchor(lesson: str, part: str = "") -> str:
    """The id of a lesson's section on the page, or of one of its parts (:data:`PARTS`)."""
    return f"{lesson}-{part}" if part else lesson


def html_lesson(report: LessonReport) -> str:
    """A lesson's section: what holds the class back and who needs help first, every student's
    row last (in a class of hundreds, that table is most of the page)."""
    lesson = report.lesson
    exercises = "".join(html_exercise(report, e) for e in report.exercises)
    parts = {
        "mistakes": html_plot(plot_mistakes(report), f"{lesson}: named mistakes")
        + html_mistakes(report),
        "talk": html_to_talk_to(report),
        "exercises": f'<div class="exercises">{exercises}</div>',
        "students": html_students(report),
    }
    links = " · ".join(f'<a href="#{esc(anchor(lesson, p))}">{esc(h)}</a>' for p, h in PARTS)
    return (
        f'<section class="lesson" id="{esc(anchor(lesson))}">'
        f"<h2>{esc(lesson)}</h2>{html_summary(report)}<nav><p>{links}</p></nav>"
        + html_plot(plot_exercises(report), f"{lesson}: points per exercise")
        + html_plot(plot_totals(report), f"{lesson}: total scores")
        + "".join(f'<h3 id="{esc(anchor(lesson, p))}">{esc(h)}</h3>{parts[p]}' for p, h in PARTS)
        + "</section>"
    )


def html_contents(reports: list[LessonReport]) -> str:
    """With several lessons, a table of them at the top: each links to its section."""
    if len(reports) < 2:
        return ""
    rows = []
    for r in reports:
        s = summary(r)
        rows.append(
            f'<tr data-lesson="{esc(r.lesson)}">'
            f'<td><a href="#{esc(anchor(r.lesson))}">{esc(r.lesson)}</a></td>'
            f'<td class="num">{s["students"]}</td>'
            f'<td class="num">{_mean(s["mean_score"])} / {s["max_score"]:g}</td>'
            f'<td class="num">{s["mastered"]}</td><td class="num">{s["stuck"]}</td></tr>'
        )
    header = ["lesson", "students", "mean score", "mastered", "stuck"]
    return _table(header, rows, "contents")


def html_page(course_id: str, reports: list[LessonReport]) -> str:
    """One self-contained page: a section per lesson."""
    lessons = ", ".join(r.lesson for r in reports)
    title = f"Class report: {course_id} · {lessons}"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    after = reports[0].stuck_after if reports else STUCK_AFTER
    notes = (
        f"<p>Scores: the points the answers earned, from the nbgrader gradebook, before any late "
        f"penalty (a late student's row says how late, and the penalty; the JSON and CSV give "
        f"the score after it, as <code>nbgrader export</code> does); mistakes and attempts from "
        f"the course history. "
        f"Mastered: at least {THRESHOLD:.0%} of the mastery questions' points. Stuck: the same "
        f"named mistake on the same exercise in each of the last {after} distinct "
        f"submissions. Not attempted: an exercise still unwritten or a question unanswered in "
        f"the student's current submission, counted per exercise, not as a mistake. "
        f"Generated {esc(when)}.</p>"
    )
    body = "".join(html_lesson(r) for r in reports)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{esc(title)}</h1>{notes}{html_contents(reports)}{body}</body></html>\n"
    )
