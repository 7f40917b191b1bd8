"""``attn-grade check NOTEBOOK``: the learner's self-check, with the grader's own engine.

The notebook runs in a sandbox as in grading (:mod:`autograder.engine`), cells chosen as
:mod:`autograder.notebook` says, and every exercise and mastery question is judged by the same
checks from outside the sandbox — at its test cell, as in grading, or at the end if the notebook
has no test cell for it. Only the diagnosis sentence is shown, never a test's source. The mastery
score is recorded with :mod:`attnlib.mastery` unless ``record`` is off.

On a machine without bubblewrap (a learner's laptop, say) the sandbox is a plain child process
with limits, and the report says so: the verdicts are the same, only the isolation differs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlib import checks, mastery, quiz

from . import cells, engine, scoring, submission, view
from .limits import Limits
from .notebook import changed_names, lesson_of, read, runs_whole, setup_only
from .runner import Runner
from .template import Template


@dataclass
class Line:
    """One line of the self-check: an exercise or a question."""

    kind: str  # "exercise" | "question"
    name: str
    passed: bool
    message: str = ""
    read: str = ""

    def text(self) -> str:
        mark = "✓" if self.passed else "✗"
        if self.passed:
            return f"{mark} {self.name}"
        read = f" (Read: {self.read}.)" if self.read else ""
        return f"{mark} {self.name}: {self.message}{read}"


@dataclass
class Report:
    path: str
    lesson: str
    lines: list[Line] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    mastery: dict | None = None
    isolation: str = "namespaces"
    whole: list[str] = field(default_factory=list)  # course cells run whole: the names needed
    repairs: list[str] = field(default_factory=list)  # course cells set back, as grading does

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(line.passed for line in self.lines)

    def line(self, name: str) -> Line | None:
        return next((x for x in self.lines if x.name == name), None)

    def as_dict(self) -> dict:
        return {
            "notebook": self.path,
            "lesson": self.lesson,
            "passed": self.passed,
            "exercises": [asdict(x) for x in self.lines if x.kind == "exercise"],
            "questions": [asdict(x) for x in self.lines if x.kind == "question"],
            "problems": self.problems,
            "ran_whole": self.whole,
            "repaired": self.repairs,
            "mastery": self.mastery,
            "isolation": self.isolation,
        }

    def remarks(self) -> list[str]:
        """What the check noticed besides its verdicts: course cells it ran whole, and cells
        that raised (each part after a blank line, indented under its heading)."""
        out = []
        if self.repairs:
            out += ["", "Course cells your notebook changed, checked as grading will check them:"]
            out += [f"  {r}" for r in self.repairs]
        if self.whole:
            out += ["", "Your code uses what these course cells compute, directly or through one "
                    "another, so they ran in full:"]  # fmt: skip
            out += [f"  {w}" for w in self.whole]
        if self.problems:
            out += ["", "Problems running the notebook:"] + [f"  {p}" for p in self.problems]
        return out

    def text(self) -> str:
        out = [f"{self.path} — lesson {self.lesson}", ""]
        exercises = [x for x in self.lines if x.kind == "exercise"]
        questions = [x for x in self.lines if x.kind == "question"]
        out += ["Exercises:"] + [f"  {x.text()}" for x in exercises]
        if questions:
            out += ["", "Mastery check:"] + [f"  {x.text()}" for x in questions]
        out += self.remarks()
        if self.mastery:
            m = self.mastery
            verdict = "mastered" if m["mastered"] else "not yet mastered"
            kept = "recorded" if m.get("recorded") else "not recorded"
            if not m.get("answered", True):
                kept = "not recorded: no question answered yet"
            out += ["", f"Mastery: {m['score']:g}/{m['total']:g}, {verdict} ({kept})."]
        if self.isolation == "none":
            out += ["", "(bubblewrap is not installed here, so your code ran without a sandbox.)"]
        done = sum(x.passed for x in exercises)
        out += [
            "",
            f"{done}/{len(exercises)} exercises pass" + (" — all done!" if self.passed else "."),
        ]
        return "\n".join(out)


# Rounds of the check at most: set-up only; then with the course cells that bind or change what
# the learner's code missed; then with those that bind or change what those cells missed.
ROUNDS = 3
_UNDEFINED = re.compile(r"name '(\w+)' is not defined")


def steps(nb, whole: Collection[int] = ()) -> list[engine.Step]:
    """Solution, test and ``setup`` cells in full, and the cells at the indices ``whole``; the
    set-up of the others (see autograder.notebook)."""
    out = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            out.append(
                engine.Step(index, cell.source, scoring.hidden_calls(index, cell.source, True))
            )
        elif runs_whole(cell) or index in whole:
            out.append(engine.Step(index, cell.source))
        else:
            source = setup_only(cell.source)
            if source.strip():
                out.append(engine.Step(index, source))
    return out


@functools.cache
def isolation() -> str:
    return "namespaces" if view.probe() is None else "none"


def run_check(path: Path, limits: Limits, record: bool = True) -> Report:
    """Check the notebook at ``path``; raise :class:`NotebookError` if it cannot be read.

    Course cells run only for their set-up, unless the learner's code needs more of one: a name
    it missed (a ``NameError``) that a course cell before it binds or changes sends the check
    round again with that cell run whole, as grading runs it (at most :data:`ROUNDS` rounds)."""
    path = Path(path)
    nb = read(path)
    repairs = cells.repair(nb)  # as grading repairs it, before anything runs
    lesson = lesson_of(path)
    exercises = [e.name for e in checks.LESSONS[lesson]]
    questions = quiz.questions(lesson)
    files = {}
    try:
        files = submission.files_beside(path.parent)
    except (OSError, submission.Refused):
        pass
    report = Report(str(path), lesson, isolation=isolation(), repairs=repairs)
    whole: dict[int, list[str]] = {}  # course cell run whole → the names the learner's code needs
    for round_ in range(1, ROUNDS + 1):
        plan = steps(nb, set(whole))
        found, notes = _judge(nb, lesson, plan, files, limits, report.isolation)
        more = _cells_binding(nb, _undefined_names(found), set(whole))
        if not more or round_ == ROUNDS:
            break
        whole.update(more)
    report.whole = [
        f"the cell that begins {_first_line(nb.cells[i].source)!r} ({', '.join(names)})"
        for i, names in sorted(whole.items())
    ]
    verdicts = {v.name: v for v in found.verdicts}
    visible = _visible_failures(plan, found)
    for name in exercises:
        v = verdicts[name]
        if v.passed and name in visible:
            report.lines.append(Line("exercise", name, False, visible[name], v.read))
        else:
            report.lines.append(Line("exercise", name, v.passed, v.message, v.read))
    score = total = 0
    missed = []
    begun = False  # some question answered: else nothing is recorded, as quiz.grade records
    for q in questions:
        v = verdicts[q.key]
        report.lines.append(Line("question", q.key, v.passed, v.message))
        total += q.points
        score += q.points if v.passed else 0
        begun = begun or v.message != quiz.NOT_ANSWERED.format(key=q.key)
        if not v.passed:
            missed.append(q.topic)
    if total:
        attempt = mastery.Attempt(lesson, score, total, tuple(dict.fromkeys(missed)))
        if record and begun:
            attempt = mastery.record(lesson, score, total, attempt.missed)
        report.mastery = {
            "score": score,
            "total": total,
            "mastered": attempt.mastered,
            "recorded": record and begun,
            "answered": begun,
        }
    report.problems = [*notes, *_cell_errors(nb, found, set(whole))]
    return report


def _judge(
    nb, lesson: str, plan: list[engine.Step], files: dict, limits: Limits, isolation: str
) -> tuple[engine.Graded, list[str]]:
    """Run ``plan`` in a sandbox for the verdicts (and, for a lesson with demonstrations, once
    more for the outputs); what it found, and the runner's notes."""
    exercises = [e.name for e in checks.LESSONS[lesson]]
    questions = quiz.questions(lesson)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    found = engine.Graded()
    with contextlib.ExitStack() as stack:
        demos = None
        if view.has_demos(lesson):  # its template warms while the notebook runs for verdicts
            demos = stack.enter_context(Template(lesson, isolation, demos=True, wait=False))
        template = stack.enter_context(Template(lesson, isolation, wait=False))
        checks.draw_ahead(lesson)  # while the template warms
        template.ready()
        runner = Runner(template, limits, files, student=quiz.learner_id())
        _decide(runner, lesson, plan, sources, exercises, questions, found)
        template.close()  # its work is done: one template from here on
        if demos is not None:  # the outputs from the demonstrations' edition (engine.grade)
            shown = engine.Graded()
            demos.ready()
            runner = Runner(demos, limits, files, student=quiz.learner_id())
            try:
                engine.run_steps(runner, plan, sources, shown, engine.by_cell(found.verdicts))
            finally:
                runner.close()
            found.cells = shown.cells
    return found, runner.notes


def _decide(
    runner: Runner,
    lesson: str,
    plan: list[engine.Step],
    sources: list[str],
    exercises: list[str],
    questions: list,
    found: engine.Graded,
) -> None:
    """Run the notebook for its verdicts, then check every exercise and question whose test
    cell did not decide one; the runner is closed after."""
    try:
        engine.run_steps(runner, plan, sources, found)
        seen = {v.name for v in found.verdicts}
        for name in exercises:
            if name not in seen:
                call = scoring.Call(-1, "check", name, name)
                found.verdicts.append(scoring.check(runner, call, sources, runner.student))
        for q in questions:
            if q.key not in seen:
                call = scoring.Call(-1, "answer", q.key, q.key, lesson)
                found.verdicts.append(scoring.check(runner, call, sources, runner.student))
    finally:
        runner.close()


def _undefined_names(found: engine.Graded) -> dict[str, float]:
    """Names a ``NameError`` said were not defined → the first cell where one did (a check made
    at the end of the notebook counts as after every cell)."""
    out: dict[str, float] = {}
    for index in sorted(found.cells):
        for o in found.cells[index].get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == "NameError":
                for name in _UNDEFINED.findall(str(o.get("evalue"))):
                    out.setdefault(name, index)
    for v in found.verdicts:
        for name in _UNDEFINED.findall(v.message):
            out[name] = min(out.get(name, math.inf), v.cell if v.cell >= 0 else math.inf)
    return out


def _cells_binding(nb, missed: dict[str, float], whole: set[int]) -> dict[int, list[str]]:
    """Course cells run for their set-up only that bind a name the learner's code missed, before
    the cell that missed it: cell index → those names. A cell that changes such a name in place
    binds it too (its set-up forgot the name: autograder.notebook)."""
    out: dict[int, list[str]] = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or runs_whole(cell) or index in whole:
            continue
        bound = changed_names(cell.source)
        names = [name for name, at in missed.items() if name in bound and index < at]
        if names:
            out[index] = names
    return out


def _visible_failures(plan: list[engine.Step], found: engine.Graded) -> dict[str, str]:
    """Exercises whose visible test (in their test cell) failed, though the checks passed."""
    out: dict[str, str] = {}
    for step in plan:
        if not step.calls:
            continue
        for o in found.cells.get(step.index, {}).get("outputs", [])[:-1]:
            if o.get("output_type") == "error":
                text = f"a visible test fails: {o.get('ename')}: {o.get('evalue')}".strip()
                for call in step.calls:
                    out.setdefault(call.name, text)
                break
    return out


def _cell_errors(nb, found: engine.Graded, whole: set[int]) -> list[str]:
    """The errors of the cells that ran, but for test cells (their verdicts are the report's
    lines): a solution cell's, and what ran of any other cell. A set-up that fails leaves out
    what later cells need (an import, say), so an exercise may then fail with a NameError whose
    cause is only here."""
    out = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        for o in found.cells.get(index, {}).get("outputs", []):
            if o.get("output_type") != "error":
                continue
            if meta.get("solution"):
                if o.get("ename") == "NotImplementedError" and not o.get("evalue"):
                    continue  # not written yet: its ✗ line already says so
                name = meta.get("grade_id") or f"cell {index}"
            else:
                name = f"the cell that begins {_first_line(cell.source)!r}"
                if not runs_whole(cell) and index not in whole:
                    name += " (not an exercise: the check runs its imports and definitions)"
            out.append(f"{name}: {o.get('ename')}: {str(o.get('evalue'))[:200]}")
    return out


def _first_line(source: str, width: int = 60) -> str:
    """The cell's first line of code (not a magic such as ``%matplotlib inline``, nor a comment),
    cut; a cell of nothing else is named by its first line."""
    lines = [x.strip() for x in source.splitlines() if x.strip()]
    line = next((x for x in lines if not x.startswith(("%", "!", "#"))), lines[0] if lines else "")
    return line if len(line) <= width else line[: width - 1] + "…"
