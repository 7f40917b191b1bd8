"""``attn-grade check NOTEBOOK``: the learner's self-check.

The notebook is not replayed top to bottom (figures, timing runs): as in
:mod:`autograder.notebook`, the solution cells run in full and the other cells only for their
set-up (imports, definitions, literal assignments); the visible test cells run too. All of it runs
in a child process (:mod:`autograder.isolation`) with a per-cell timeout, so an infinite loop
cannot hang the check. Each exercise is then checked from outside with the hidden invariants of
:mod:`attnlib.checks` (only the diagnosis sentence is shown, never a test's source), and the
mastery questions are scored and recorded with :mod:`attnlib.mastery`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from attnlib import checks, mastery, quiz

from . import executor, grading, isolation
from .notebook import NotebookError, _setup_only, lesson_of


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

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(line.passed for line in self.lines)

    def as_dict(self) -> dict:
        return {
            "notebook": self.path,
            "lesson": self.lesson,
            "passed": self.passed,
            "exercises": [asdict(x) for x in self.lines if x.kind == "exercise"],
            "questions": [asdict(x) for x in self.lines if x.kind == "question"],
            "problems": self.problems,
            "mastery": self.mastery,
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
        done = sum(x.passed for x in exercises)
        out += [
            "",
            f"{done}/{len(exercises)} exercises pass" + (" — all done!" if self.passed else "."),
        ]
        return "\n".join(out)


def _cells(nb) -> tuple[list[dict], dict[int, list[grading.Call]]]:
    cells, tests = [], {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            found = grading.hidden_calls(index, cell.source, reports=True)
            tests[index] = found
            cells.append(
                {
                    "index": index,
                    "source": cell.source,
                    "snapshot": sorted({c.ident for c in found}),
                }
            )
        elif meta.get("solution"):
            cells.append({"index": index, "source": cell.source})
        else:
            source = _setup_only(cell.source)
            if source.strip():
                cells.append({"index": index, "source": source})
    return cells, tests


def run_check(path: Path, limits: isolation.Limits, record: bool = True) -> Report:
    """Check the notebook at ``path``; raise :class:`NotebookError` if it cannot be read."""
    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 — any unreadable file gets the same clear answer
        raise NotebookError(f"{path} is not a readable notebook: {error}") from None
    lesson = lesson_of(path, nb)
    exercises = [e.name for e in checks.LESSONS[lesson]]
    questions = quiz.questions(lesson)
    cells, tests = _cells(nb)
    executor.warm_up()
    uid = isolation.SANDBOX_UID_BASE + 999 if isolation.can_drop_privileges() else None
    files = {}
    for other in path.parent.iterdir():
        if other.is_file() and other.suffix != ".ipynb" and other.stat().st_size < 16 * 2**20:
            files[other.name] = other.read_bytes()
    runner = grading.Runner(
        cells, limits, uid, {}, files, final_snapshot=[*exercises, *(q.key for q in questions)]
    )
    report = Report(str(path), lesson)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    try:
        runner.run()
        outside = {
            name: grading.check_outside(runner, grading.Call(-1, "check", name, name), sources)
            for name in exercises
        }
        answers = {
            q.key: grading.check_outside(
                runner, grading.Call(-1, "answer", q.key, q.key, lesson), sources
            )
            for q in questions
        }
    finally:
        runner.close()
    outputs = runner.outputs()
    visible: dict[str, str] = {}
    for index, found in tests.items():
        errors = [
            o for o in outputs.get(index, {}).get("outputs", []) if o.get("output_type") == "error"
        ]
        if not errors:
            continue
        err = errors[0]
        text = f"a visible test fails: {err.get('ename')}: {err.get('evalue')}".strip()
        for call in found:
            visible.setdefault(call.name, text)
    for name in exercises:
        v = outside[name]
        if v.passed and name in visible:
            report.lines.append(Line("exercise", name, False, visible[name], v.read))
        else:
            report.lines.append(Line("exercise", name, v.passed, v.message, v.read))
    score = total = 0
    missed = []
    for q in questions:
        v = answers[q.key]
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
    report.problems = [*runner.notes, *_solution_errors(nb, outputs)]
    return report


def _solution_errors(nb, outputs: dict) -> list[str]:
    out = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        for o in outputs.get(index, {}).get("outputs", []):
            if o.get("output_type") == "error":
                name = meta.get("grade_id") or f"cell {index}"
                out.append(f"{name}: {o.get('ename')}: {str(o.get('evalue'))[:200]}")
    return out
