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

Some questions are parameterised per learner: their numbers come from
:func:`learner_rng`, seeded by the lesson and :func:`learner_id`, so every
learner gets their own numbers and the checker recomputes the answer from
the same seed. Such a question's ``prompt`` is a function that writes the
question with the learner's numbers (:meth:`Question.describe`).
"""

from __future__ import annotations

import html
import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import mastery
from .learner import as_learner, learner_id, learner_rng


@dataclass(frozen=True)
class Question:
    """One mastery question: its key (``"q1"``), prompt, topic to revisit and checker."""

    key: str
    prompt: str | Callable[[], str]
    topic: str
    check: Callable[[object], bool]
    points: int = 1

    def describe(self) -> str:
        """The question as the learner reads it (with their own numbers, if it has any)."""
        return self.prompt() if callable(self.prompt) else self.prompt

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
    "06-build-and-train": "lesson06",
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


NOT_ANSWERED = "not answered yet: assign your answer to {key} in the cell above and run it"
_MISSING = object()


def answered(answer: object) -> bool:
    """Whether ``answer`` is one: not missing, ``None`` or ``...`` (an answer cell's blank)."""
    return not (answer is None or answer is _MISSING or answer is Ellipsis)


def verdict(lesson: str, key: str, answer: object) -> tuple[bool, str]:
    """``(passed, sentence)`` on ``answer`` to question ``key`` ("" when it passed)."""
    q = question(lesson, key)
    if not answered(answer):
        return False, NOT_ANSWERED.format(key=key)
    if q.accepts(answer):
        return True, ""
    return False, f"not right yet. Revisit: {q.topic}."


def check_answer(lesson: str, key: str, answer: object = _MISSING) -> None:
    """A mastery question's test cell: print ``✓``, or fail with one sentence (what to reread).

    Without ``answer``, the learner's variable named ``key`` is read from the notebook, so an
    answer cell that was never run gives "not answered yet" rather than a ``NameError``.
    """
    from ..checks import CheckFailed

    if answer is _MISSING:
        answer = sys._getframe(1).f_globals.get(key, _MISSING)
    passed, sentence = verdict(lesson, key, answer)
    if not passed:
        raise CheckFailed(f"{key}: {sentence}")
    print(f"✓ {key}: correct.")


def assert_correct(lesson: str, key: str, answer: object) -> None:
    """Hidden-test entry: raise ``AssertionError`` naming the topic unless ``answer`` is right."""
    q = question(lesson, key)
    if not q.accepts(answer):
        raise AssertionError(f"{key}: not right yet. Revisit: {q.topic}.")
    print(f"✓ {key}")


def grade(lesson: str, answers: Mapping[str, object], record: bool = True) -> mastery.Attempt:
    """Score ``answers`` (e.g. ``globals()``), show a table of the questions, record mastery.

    A question whose key is missing from ``answers`` counts as wrong. In a notebook the table is
    HTML, each missed question linking to the section to reread; elsewhere it is plain text.
    Nothing is recorded while no question is answered (a *Run All* halfway through the lesson):
    the next lesson then still says the check is to be done, not that every section is to be
    reread.
    """
    rows, score, total, missed = [], 0, 0, []
    for q in questions(lesson):
        total += q.points
        ok = q.key in answers and q.accepts(answers[q.key])
        score += q.points if ok else 0
        if not ok:
            missed.append(q.topic)
        rows.append((q, ok))
    if total == 0:
        raise ValueError(f"lesson {lesson} has no mastery questions yet")
    attempt = mastery.Attempt(lesson, score, total, tuple(dict.fromkeys(missed)))
    begun = any(answered(answers.get(q.key, _MISSING)) for q in questions(lesson))
    if record and begun and not os.environ.get("NBGRADER_EXECUTION"):
        attempt = mastery.record(lesson, score, total, attempt.missed)
    _show(Results(lesson, rows, score, total, attempt, begun))
    return attempt


@dataclass
class Results:
    """The mastery check's table: plain text, and HTML for a notebook."""

    lesson: str
    rows: list[tuple[Question, bool]]
    score: int
    total: int
    attempt: mastery.Attempt
    begun: bool = True  # some question answered (else nothing was recorded)

    def verdict(self) -> str:
        if not self.begun:
            return f"{self.lesson}: no question answered yet, so nothing was recorded."
        state = "mastered" if self.attempt.mastered else (
            f"not yet mastered ({mastery.THRESHOLD:.0%} needed)")  # fmt: skip
        return f"{self.lesson}: {self.score}/{self.total} ({self.attempt.fraction:.0%}), {state}."

    def __str__(self) -> str:
        lines = []
        for q, ok in self.rows:
            revisit = "" if ok else f"  → revisit {q.topic}"
            lines.append(f"{'✓' if ok else '✗'} {q.key}: {q.describe()}{revisit}")
        return "\n".join([*lines, "", self.verdict()])

    def _repr_html_(self) -> str:
        cells = []
        for q, ok in self.rows:
            where = "" if ok else _link(self.lesson, q.topic)
            cells.append(
                f"<tr><td>{'✓' if ok else '✗'}</td><td><code>{html.escape(q.key)}</code></td>"
                f"<td style='text-align:left'>{html.escape(q.describe())}</td>"
                f"<td style='text-align:left'>{where}</td></tr>"
            )
        head = "<tr><th></th><th>question</th><th>asked</th><th>reread</th></tr>"
        return (
            "<table class='attnlib-mastery'>" + head + "".join(cells) + "</table>"
            f"<p><b>{html.escape(self.verdict())}</b></p>"
        )


def _show(results: Results) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(results)
    else:
        print(results)


def _link(lesson: str, topic: str) -> str:
    """``topic`` ("02-softmax-masking, 'Which axis?'") as a link to that heading of its lesson
    notebook, where the notebook can be found beside this one; else as text."""
    text = html.escape(topic)
    found = re.fullmatch(r"(\d\d-[\w-]+), '(.+)'", topic)
    if not found:
        return text
    target, section = found.groups()
    heading = _heading(target, section)
    if heading is None:
        return text
    anchor = heading.replace(" ", "-")  # JupyterLab's id for a heading
    page = "" if target == lesson else f"../{target}/{target}.ipynb"
    return f"<a href='{html.escape(page + '#' + anchor, quote=True)}'>{text}</a>"


def _heading(lesson: str, section: str) -> str | None:
    """The full heading of ``lesson``'s notebook that contains ``section``, if it can be read."""
    here = os.environ.get("JPY_SESSION_NAME", "")
    folder = os.path.dirname(os.path.dirname(os.path.abspath(here))) if here else os.getcwd()
    for path in (os.path.join(folder, lesson, f"{lesson}.ipynb"),
                 os.path.join(os.getcwd(), "..", lesson, f"{lesson}.ipynb")):  # fmt: skip
        try:
            import nbformat

            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 — no notebook there: the topic stays text
            continue
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for line in cell.source.splitlines():
                if line.startswith("#") and section in line:
                    return line.lstrip("#").strip()
    return None


__all__ = [
    "Question",
    "answered",
    "as_learner",
    "assert_correct",
    "check_answer",
    "grade",
    "learner_id",
    "learner_rng",
    "question",
    "questions",
    "verdict",
]
