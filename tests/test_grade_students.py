"""Made-up students for the attn-grade tests and benchmark: honest ones and classic bugs.

Each student is the lesson's source notebook (its solutions) with some solution cells edited the
way a learner might have written them, or the blank release. The tests here only check that
every edit applies; tests/test_grade_batch.py and benchmarks/grading.py use the students.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from course import REPO

GIGABYTES = """    big = np.ones((16384, 16))
    try:
        dot_scores(big, big)  # (16384, 16384): 2 GiB, made by whoever runs dot_scores
    except Exception:
        pass
    d_k = np.shape(Q)[-1]
"""

# student -> {grade_id of a solution cell: [(old, new), ...]}; "release" means the blank notebook
STUDENTS = {
    "02-softmax-masking": {
        "honest": {},
        "blank": "release",
        "wrong-axis": {"softmax": [("np.max(x, axis=axis,", "np.max(x, axis=0,"),
                                   ("np.sum(e, axis=axis,", "np.sum(e, axis=0,")]},
        "no-shift": {"softmax": [("shifted = x - np.max(x, axis=axis, keepdims=True)",
                                  "shifted = x")]},
        "causal-lt": {"causal_mask": [("positions[None, :] <= positions[:, None]",
                                       "positions[None, :] < positions[:, None]")]},
        "mask-after": {"masked_softmax": [("blocked = np.where(mask, scores, -np.inf)",
                                           "blocked = scores")]},
        "scale-dk": {"attention": [("/ math.sqrt(d_k)", "/ d_k")]},
        "syntax-error": {"padding_mask": [("real[:, None, :]", "real[:, None, :")]},
        "wrong-answers": {"answer_q1": [("(5, 32))", "(5, 16))")],
                          "answer_q4": [('q4 = "b"', 'q4 = "a"')]},
    },
    "01-scoring": {
        "honest": {},
        "blank": "release",
        "no-transpose": {"dot_scores": [("Q @ np.swapaxes(K, -1, -2)", "Q @ K")]},
        "scale-dk": {"scaled_dot_scores": [("/ math.sqrt(d_k)", "/ d_k")]},
        "no-eps": {"cosine_scores": [("np.maximum(np.linalg.norm(Q, axis=-1, keepdims=True), eps)",
                                      "np.linalg.norm(Q, axis=-1, keepdims=True)")]},
        "wrong-answer": {"answer_q3": [('q3 = "d"', 'q3 = "a"')]},
        # no-transpose's mistake, and a scaled_dot_scores that first asks dot_scores (the
        # course's, standing in for the wrong one, called back) for 2 GiB from two arrays
        # inside the bound on what a callback sends: graded as no-transpose is
        "asks-for-gigabytes": {
            "dot_scores": [("Q @ np.swapaxes(K, -1, -2)", "Q @ K")],
            "scaled_dot_scores": [("    d_k = np.shape(Q)[-1]\n", GIGABYTES)],
        },
    },
}  # fmt: skip


def notebook_of(lesson: str) -> Path:
    return REPO / "solutions" / lesson / f"{lesson}.ipynb"


def student_notebook(lesson: str, edits) -> nbformat.NotebookNode:
    """The source notebook with ``edits`` applied (or the release, for ``"release"``)."""
    if edits == "release":
        return nbformat.read(REPO / "lessons" / lesson / f"{lesson}.ipynb", as_version=4)
    nb = nbformat.read(notebook_of(lesson), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        for old, new in edits.get(grade_id, []):
            assert old in cell.source, f"{lesson}:{grade_id}: {old!r} not in the solution"
            cell.source = cell.source.replace(old, new)
    return nb


def edit_cell(nb: nbformat.NotebookNode, grade_id: str, source: str) -> None:
    """Replace the source of the cell ``grade_id``."""
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
            return
    raise KeyError(grade_id)


def submit(course: Path, lesson: str, student: str, nb: nbformat.NotebookNode | str) -> Path:
    """Put ``nb`` (or raw text, for a corrupted file) in ``submitted/STUDENT/LESSON``."""
    folder = course / "submitted" / student / lesson
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    path = folder / f"{lesson}.ipynb"
    if isinstance(nb, str):
        path.write_text(nb)
    else:
        nbformat.write(nb, path)
    return path


def submit_all(course: Path, lesson: str, prefix: str = "") -> list[str]:
    """Submit every made-up student of ``lesson``; return their ids."""
    names = []
    for name, edits in STUDENTS[lesson].items():
        submit(course, lesson, prefix + name, student_notebook(lesson, edits))
        names.append(prefix + name)
    return names


@pytest.mark.parametrize("lesson", sorted(STUDENTS))
def test_every_edit_applies(lesson):
    for edits in STUDENTS[lesson].values():
        student_notebook(lesson, edits)
