"""Per-student feedback in Markdown: each mistake named, and the section of the lesson to reread.

``attn-grade batch`` writes ``autograded/STUDENT/LESSON/attn-feedback.md`` beside nbgrader's
autograded notebooks. ``nbgrader generate_feedback`` copies the files it finds there into
``feedback/``, so the learner receives it next to nbgrader's own HTML feedback.

Scores come from the gradebook; reasons from the grader's verdicts. Any text that learner code
could have shaped — an exception's message, a diagnosis quoting a value, a student's folder name —
is written as an inline code span on one line (:func:`code`), so it cannot open a heading, a
link or an HTML tag: a notebook that prints ``### Correct`` or ``<script>`` shows exactly that.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import nbformat

from attnlib import checks

from .submission import shown

FILENAME = "attn-feedback.md"


def code(text: object, limit: int = 600) -> str:
    """``text`` as one inline code span, whatever backticks, newlines or markup it holds."""
    text = re.sub(r"[\x00-\x1f\x7f\s]+", " ", str(text)).strip()[:limit] or " "
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _grades(coursedir, lesson: str, student: str, notebook: str) -> tuple[dict[str, tuple], float]:
    """The notebook's grades (grade id → (score, max score)) and nbgrader's late penalty on it."""
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        nb = gb.find_submission_notebook(notebook, lesson, student)
        grades = {g.name: (g.score, g.max_score) for g in nb.grades}
        return grades, float(nb.late_submission_penalty or 0.0)


def notebook_feedback(
    nb, result: dict, grades: dict[str, tuple], notebook: str, penalty: float = 0.0
) -> list[str]:
    """Markdown lines for one autograded notebook (``penalty``: nbgrader's late penalty)."""
    verdicts: dict[int, list[dict]] = {}
    for v in result.get("verdicts", []):
        verdicts.setdefault(int(v["cell"]), []).append(v)
    lines = [f"## {notebook}", ""]
    total = sum(g[0] or 0 for g in grades.values())
    most = sum(g[1] or 0 for g in grades.values())
    lines += [f"Score: **{total:g} / {most:g}**", ""]
    if penalty:
        counts = max(0.0, total - penalty)
        lines += [f"Submitted after the due date: the late penalty takes {penalty:g} points, so "
                  f"this notebook counts **{counts:g} / {most:g}**.", ""]  # fmt: skip
    good, bad = [], []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if not meta.get("grade") or grade_id not in grades:
            continue
        score, max_score = grades[grade_id]
        score = score or 0
        name = ", ".join(v["name"] for v in verdicts.get(index, [])) or grade_id
        if score >= (max_score or 0):
            good.append(f"- ✓ **{name}** ({score:g}/{max_score:g})")
            continue
        reasons, reads = [], []
        for v in verdicts.get(index, []):
            if not v["passed"]:
                reasons.append(v["message"])
                if v.get("read"):
                    reads.append(v["read"])
        if not reasons:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    reasons.append(f"{out.get('ename')}: {str(out.get('evalue', ''))[:400]}")
                    break
            for v in verdicts.get(index, []):
                exercise = checks.EXERCISES.get(v["name"])
                if exercise is not None:
                    reads.append(exercise.read)
        reason = " ".join(reasons) or "this test did not pass"
        entry = f"- ✗ **{name}** ({score:g}/{max_score:g}): {code(reason)}"
        if reads:
            entry += f"  \n  Reread: {'; '.join(dict.fromkeys(reads))}."
        bad.append(entry)
    if bad:
        lines += ["### To fix", "", *bad, ""]
    if good:
        lines += ["### Correct", "", *good, ""]
    notes = result.get("notes", [])
    if notes:
        lines += ["### While running your notebook", "", *[f"- {code(n)}" for n in notes], ""]
    return lines


def write_for(coursedir, lesson: str, student: str, results: dict) -> Path | None:
    """Write the student's feedback file (``results``: notebook → grading result)."""
    dest = Path(coursedir.format_path(coursedir.autograded_directory, student, lesson))
    if not dest.is_dir():
        return None
    lines = [f"# Feedback on {lesson}", "", f"Student: {code(shown(student))}", ""]
    for path in sorted(dest.glob("*.ipynb")):
        notebook = path.stem
        nb = nbformat.read(path, as_version=4)
        grades, penalty = _grades(coursedir, lesson, student, notebook)
        lines += notebook_feedback(nb, results.get(notebook, {}), grades, notebook, penalty)
    target = dest / FILENAME
    with contextlib.suppress(FileNotFoundError):
        os.chmod(target, 0o644)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.chmod(target, 0o444)
    return target
