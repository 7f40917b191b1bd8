"""The course's ``SaveAutoGrades`` writes what nbgrader's writes, in one transaction a notebook.

nbgrader's own finds each cell's grade or comment with a query of its own, and commits after
every graded cell and every answer cell, each a wait on the disk by the gradebook's one writer.
The course's subclass (:mod:`autograder.nbgrader_plugin`) must leave the gradebook exactly as
nbgrader's does — the same scores, the same "needs manual grade" flags, the same comments — with
one commit for the notebook and a few queries whatever its cells, and a notebook whose saving
fails half-way must leave none of its new scores behind (nbgrader's leaves the cells before the
failure). It scores only a valid notebook: the course's pipeline validates once after its last
step (``trusted_pipeline``), so what the sandbox's outputs made of it is validated here, first."""

from __future__ import annotations

import collections
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from course import BIN, make_course
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import SaveAutoGrades as NbgraderSaveAutoGrades
from sqlalchemy import event
from sqlalchemy.orm import Session
from test_grade_students import STUDENTS, student_notebook, submit
from test_gradebook_engine import Seen

from autograder import batch, nbgrader_plugin

LESSON = "02-softmax-masking"
STUDENT = "wrong-axis"  # some checks pass, some fail: the scores differ from cell to cell
pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.filterwarnings("ignore:.*not in session.*"),  # nbgrader's own SAWarnings
]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course with one student graded by ``attn-grade batch``."""
    root = make_course(tmp_path_factory.mktemp("save-once"), [LESSON])
    submit(root, LESSON, STUDENT, student_notebook(LESSON, STUDENTS[LESSON][STUDENT]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")  # nbgrader: alembic
        options = batch.BatchOptions(workers=1, progress=False, feedback=False)
        results = batch.run_batch(root, LESSON, options)
    assert [r.status for r in results] == ["graded"]
    return root


def gradebook_copy(course: Path, name: str) -> str:
    """A copy of the course's gradebook with the student's scores and comments blanked out,
    as its URL."""
    path = course / name
    shutil.copy(course / "gradebook.db", path)
    url = f"sqlite:///{path}"
    with Gradebook(url) as gb:
        for notebook in gb.find_submission(LESSON, STUDENT).notebooks:
            for grade in notebook.grades:
                grade.auto_score, grade.needs_manual_grade = None, True
            for comment in notebook.comments:
                comment.auto_comment = "blanked"
        gb.db.commit()
    return url


def contents(url: str) -> dict:
    """Every score, flag and comment of the student's notebook in the gradebook at ``url``."""
    with Gradebook(url) as gb:
        notebook = gb.find_submission_notebook(LESSON, LESSON, STUDENT)
        found = {("grade", g.name): (g.auto_score, g.needs_manual_grade) for g in notebook.grades}
        found.update({("comment", c.name): c.auto_comment for c in notebook.comments})
    return found


def commits(action) -> int:
    """The transactions committed while ``action()`` runs."""
    seen = []

    def committed(session) -> None:
        seen.append(session)

    event.listen(Session, "after_commit", committed)
    try:
        action()
    finally:
        event.remove(Session, "after_commit", committed)
    return len(seen)


def selects(action) -> int:
    """The SELECT statements run while ``action()`` runs."""
    with Seen() as seen:
        action()
    return sum(statement.startswith("SELECT") for statement in seen.statements)


def save(course: Path, url: str, step: type) -> int:
    """Run ``step`` (a ``SaveAutoGrades``) on the student's graded notebook into the gradebook
    at ``url``; the number of transactions it committed."""
    path = course / "autograded" / STUDENT / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(path, as_version=4)
    resources = {"nbgrader": {"notebook": LESSON, "assignment": LESSON, "student": STUDENT,
                              "db_url": url}}  # fmt: skip
    return commits(lambda: step().preprocess(nb, resources))


def test_the_gradebook_ends_as_nbgraders_leaves_it_with_one_commit(course):
    ours_url, theirs_url = gradebook_copy(course, "ours.db"), gradebook_copy(course, "theirs.db")
    blank = contents(ours_url)
    ours = save(course, ours_url, nbgrader_plugin.SaveAutoGrades)
    theirs = save(course, theirs_url, NbgraderSaveAutoGrades)
    assert (
        contents(ours_url) == contents(theirs_url) == contents(f"sqlite:///{course}/gradebook.db")
    )
    assert contents(ours_url) != blank
    scores = {v[0] for k, v in contents(ours_url).items() if k[0] == "grade"}
    assert len(scores) > 1, f"the student's cells should score differently: {scores}"
    opening = commits(lambda: Gradebook(ours_url).close())  # nbgrader's check of the course
    assert ours == opening + 1
    assert theirs == opening + len(blank), "nbgrader's commits after every graded and answer cell"


def test_a_notebook_whose_saving_fails_half_way_keeps_none_of_its_new_scores(course, monkeypatch):
    determine = utils.determine_grade
    calls = []

    def fails_on_the_third(cell, log=None):
        calls.append(cell)
        if len(calls) == 3:
            raise RuntimeError("the grader stopped")
        return determine(cell, log)

    monkeypatch.setattr(utils, "determine_grade", fails_on_the_third)
    ours_url, theirs_url = gradebook_copy(course, "ours-cut.db"), gradebook_copy(course, "cut.db")
    blank = contents(ours_url)
    with pytest.raises(RuntimeError, match="the grader stopped"):
        save(course, ours_url, nbgrader_plugin.SaveAutoGrades)
    assert contents(ours_url) == blank
    calls.clear()
    with pytest.raises(RuntimeError, match="the grader stopped"):
        save(course, theirs_url, NbgraderSaveAutoGrades)
    kept = {k for k, v in contents(theirs_url).items() if v != blank[k]}
    assert kept, "nbgrader's own keeps the cells saved before the failure"


def test_the_notebooks_grades_and_comments_are_read_in_a_few_queries(course):
    ours_url, theirs_url = gradebook_copy(course, "q-ours.db"), gradebook_copy(course, "q.db")
    cells = len(contents(ours_url))
    ours = selects(lambda: save(course, ours_url, nbgrader_plugin.SaveAutoGrades))
    theirs = selects(lambda: save(course, theirs_url, NbgraderSaveAutoGrades))
    assert contents(ours_url) == contents(theirs_url)
    opening = selects(lambda: Gradebook(ours_url).close())  # nbgrader's check of the tables
    assert ours - opening <= 4, f"{ours - opening} queries for {cells} grades and comments"
    assert theirs - opening >= cells, "nbgrader's finds every grade and comment on its own"


def test_a_cell_with_no_grade_in_the_gradebook_fails_as_nbgraders_fails(course):
    ours_url, theirs_url = gradebook_copy(course, "m-ours.db"), gradebook_copy(course, "m.db")
    for url in (ours_url, theirs_url):
        with Gradebook(url) as gb:
            notebook = gb.find_submission_notebook(LESSON, LESSON, STUDENT)
            gone = max(notebook.grades, key=lambda grade: grade.name)
            gb.db.delete(gone)
            gb.db.commit()
    failures = []
    for url, step in (
        (ours_url, nbgrader_plugin.SaveAutoGrades),
        (theirs_url, NbgraderSaveAutoGrades),
    ):
        with pytest.raises(MissingEntry) as failed:
            save(course, url, step)
        failures.append(str(failed.value))
    assert failures[0] == failures[1]


def test_a_notebook_the_outputs_made_invalid_is_not_scored(course):
    """The sandbox's outputs enter the notebook in TrustedExecute; nbconvert validates the
    notebook only after the last step, so SaveAutoGrades validates what it is given to score."""
    ours_url, theirs_url = gradebook_copy(course, "v-ours.db"), gradebook_copy(course, "v.db")
    blank = contents(ours_url)
    path = course / "autograded" / STUDENT / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(path, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code" and c.outputs)
    code.outputs[0]["output_type"] = "not an output"  # what a faulty trusted side could write
    resources = {"nbgrader": {"notebook": LESSON, "assignment": LESSON, "student": STUDENT,
                              "db_url": ours_url}}  # fmt: skip
    with pytest.raises(nbformat.ValidationError):
        nbgrader_plugin.SaveAutoGrades().preprocess(nb, resources)
    assert contents(ours_url) == blank
    NbgraderSaveAutoGrades().preprocess(nb, {"nbgrader": {**resources["nbgrader"],
                                                          "db_url": theirs_url}})  # fmt: skip
    assert contents(theirs_url) != blank, "nbgrader's own scores it: the check is ours"


def test_a_notebook_is_validated_where_something_enters_it_and_after_the_last_step(tmp_path):
    """Per notebook graded by the batch: the submission as read and after the sanitizing steps
    (Sanitize, ahead), the sanitized notebook (nbconvert's first pass), the outputs before they
    are scored (SaveAutoGrades) and the notebook after the last step (nbconvert's second pass);
    not after each of the dozen steps between (``trusted_pipeline``)."""
    root = make_course(tmp_path, [LESSON])
    submit(root, LESSON, STUDENT, student_notebook(LESSON, STUDENTS[LESSON][STUDENT]))
    callers = collections.Counter()
    validate = nbformat.validate

    def counted(*args, **kwargs):
        callers[sys._getframe(1).f_code.co_name] += 1
        return validate(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nbformat, "validate", counted)
        mp.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")  # nbgrader: alembic
        options = batch.BatchOptions(workers=1, progress=False, feedback=False)
        results = batch.run_batch(root, LESSON, options)
    assert [r.status for r in results] == ["graded"]
    assert callers["valid"] == 3, callers  # after CheckSubmission, the last step; SaveAutoGrades
    assert callers["_validate_preprocessor"] == 2, callers  # nbconvert: once a pass
