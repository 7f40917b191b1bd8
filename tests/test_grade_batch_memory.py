"""``attn-grade batch`` holds the results of its look-ahead window only, not of every student it
has graded: a class of thousands must not cost the batch's process (or a Dask cluster, which keeps
a result for as long as its future lives) memory in proportion to the class. Run in this process,
it leaves no nbgrader application behind (a report or another batch in the same process follows)."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import os

import pytest
from course import BIN, make_course
from nbgrader.apps.autogradeapp import AutogradeApp
from test_grade_students import STUDENTS, student_notebook, submit

from autograder import batch

LESSON = "02-softmax-masking"
WORKERS = 1
pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.filterwarnings("ignore:.*not in session.*"),  # nbgrader's own SAWarnings
]


def finished_results() -> int:
    """Finished grading futures alive now, each holding a graded notebook."""
    return sum(
        1
        for obj in gc.get_objects()
        # the object's real type: asking some of PyTorch's objects for __class__ warns
        if issubclass(type(obj), cf.Future) and obj.done() and isinstance(obj.result(), dict)
    )


def test_the_batch_keeps_no_result_of_a_student_it_has_finished(tmp_path, monkeypatch):
    course = make_course(tmp_path, [LESSON])
    kinds = list(STUDENTS[LESSON].items())
    students = 10
    for n in range(students):
        kind, edits = kinds[n % len(kinds)]
        submit(course, LESSON, f"s{n:02d}-{kind}", student_notebook(LESSON, edits))
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")  # nbgrader: alembic

    held = []
    grade_student = batch._grade_student

    def watched(app, course, lesson, item, options):
        result = grade_student(app, course, lesson, item, options)
        gc.collect()
        held.append(finished_results())
        return result

    monkeypatch.setattr(batch, "_grade_student", watched)
    options = batch.BatchOptions(workers=WORKERS, progress=False, feedback=False)
    results = batch.run_batch(course, LESSON, options)

    assert [r.status for r in results] == ["graded"] * students
    assert not AutogradeApp.initialized(), "the batch left its nbgrader app behind"
    window = 2 * WORKERS + 1  # the students graded ahead of nbgrader's loop (batch._run)
    assert len(held) == students
    assert max(held) <= window, f"finished results held after each student: {held}"
