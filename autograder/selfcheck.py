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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlib import checks, mastery, quiz

from . import engine, scoring, submission, view
from .limits import Limits
from .notebook import lesson_of, read, runs_whole, setup_only
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
            "mastery": self.mastery,
            "isolation": self.isolation,
        }

    def text(self) -> str:
        out = [f"{self.path} — lesson {self.lesson}", ""]
        exercises = [x for x in self.lines if x.kind == "exercise"]
        questions = [x for x in self.lines if x.kind == "question"]
        out += ["Exercises:"] + [f"  {x.text()}" for x in exercises]
        if questions:
            out += ["", "Mastery check:"] + [f"  {x.text()}" for x in questions]
        if self.problems:
            out += ["", "Problems running the notebook:"] + [f"  {p}" for p in self.problems]
        if self.mastery:
            m = self.mastery
            verdict = "mastered" if m["mastered"] else "not yet mastered"
            kept = "recorded" if m.get("recorded") else "not recorded"
            out += ["", f"Mastery: {m['score']:g}/{m['total']:g}, {verdict} ({kept})."]
        if self.isolation == "none":
            out += ["", "(bubblewrap is not installed here, so your code ran without a sandbox.)"]
        done = sum(x.passed for x in exercises)
        out += [
            "",
            f"{done}/{len(exercises)} exercises pass" + (" — all done!" if self.passed else "."),
        ]
        return "\n".join(out)


def steps(nb) -> list[engine.Step]:
    """Solution, test and ``setup`` cells in full, the set-up of the others (see
    autograder.notebook)."""
    out = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            out.append(
                engine.Step(index, cell.source, scoring.hidden_calls(index, cell.source, True))
            )
        elif runs_whole(cell):
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
    """Check the notebook at ``path``; raise :class:`NotebookError` if it cannot be read."""
    path = Path(path)
    nb = read(path)
    lesson = lesson_of(path)
    exercises = [e.name for e in checks.LESSONS[lesson]]
    questions = quiz.questions(lesson)
    plan = steps(nb)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    files = {}
    try:
        files = submission.files_beside(path.parent)
    except (OSError, submission.Refused):
        pass
    found = engine.Graded()
    report = Report(str(path), lesson, isolation=isolation())
    with contextlib.ExitStack() as stack:
        demos = None
        if view.has_demos(lesson):  # its template warms while the notebook runs for verdicts
            demos = stack.enter_context(
                Template(lesson, report.isolation, grading=False, demos=True, wait=False)
            )
        template = stack.enter_context(
            Template(lesson, report.isolation, grading=False, wait=False)
        )
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
    for q in questions:
        v = verdicts[q.key]
        report.lines.append(Line("question", q.key, v.passed, v.message))
        total += q.points
        score += q.points if v.passed else 0
        if not v.passed:
            missed.append(q.topic)
    if total:
        attempt = mastery.Attempt(lesson, score, total, tuple(dict.fromkeys(missed)))
        if record:
            attempt = mastery.record(lesson, score, total, attempt.missed)
        report.mastery = {
            "score": score,
            "total": total,
            "mastered": attempt.mastered,
            "recorded": record,
        }
    report.problems = [*runner.notes, *_cell_errors(nb, found)]
    return report


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


def _cell_errors(nb, found: engine.Graded) -> list[str]:
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
                if not runs_whole(cell):
                    name += " (not an exercise: the check runs its imports and definitions)"
            out.append(f"{name}: {o.get('ename')}: {str(o.get('evalue'))[:200]}")
    return out


def _first_line(source: str, width: int = 60) -> str:
    line = next((x.strip() for x in source.splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"
