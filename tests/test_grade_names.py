"""A lesson id that matches nothing is said so, with the lessons there are, and changes nothing.

``nbgrader autograde 01-scorng`` answers "No notebooks were matched" with status 1; ``attn-grade
batch`` once graded nobody, printed an empty table and returned 0, so a typo in a grading script
went unnoticed. Now ``batch``, ``feedback`` and ``report`` name what they looked for, whether the
course has such a lesson and the nearest one it has, and a mistyped lesson leaves no trace.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from course import BIN, env, make_course
from test_grade_students import student_notebook, submit

from autograder import view
from autograder.names import hint

LESSON = "01-scoring"
OTHER = "02-softmax-masking"  # a course that has released only this one
pytestmark = pytest.mark.lesson01
sandboxed = pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox: {view.probe()}")


def attn_grade(course, *args):
    return subprocess.run(
        [str(BIN / "attn-grade"), *args, "--course", str(course)], cwd=course, env=env(),
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_hint_names_the_nearest_lesson_and_lists_the_rest():
    lessons = ["01-scoring", "02-softmax-masking", "03-self-cross"]
    assert hint("02-softmax", lessons, "its lessons") == (
        "did you mean '02-softmax-masking'? "
        "(its lessons: 01-scoring, 02-softmax-masking, 03-self-cross)"
    )
    assert hint("07-nothing", lessons, "its lessons") == (
        "its lessons: 01-scoring, 02-softmax-masking, 03-self-cross"
    )
    for part in ("softmax", "02", "SELF"):  # a part of one id, and of one only
        assert hint(part, lessons, "its lessons").startswith("did you mean '0"), part
    assert hint("-s", lessons, "its lessons").startswith("its lessons: ")  # a part of three
    assert hint("01-scoring", [], "lessons graded") == "there are no lessons graded yet"
    many = [f"{n:02d}-lesson" for n in range(20)]
    assert hint("x", many, "its lessons").endswith("11-lesson, … (20 in all)")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("names"), [LESSON])


@sandboxed
def test_a_mistyped_lesson_is_named_with_its_nearest_and_nothing_is_written(course):
    before = digest(course / "gradebook.db")
    batch = attn_grade(course, "batch", "01-scorng", "--json", "--csv", str(course / "out.csv"))
    assert batch.returncode == 1, batch.stderr
    assert json.loads(batch.stdout) == []
    assert (course / "out.csv").read_text().startswith("student,status,score")
    assert "no lesson '01-scorng' in this course" in batch.stderr
    assert f"{course / 'submitted'}/*/01-scorng" in batch.stderr
    assert "did you mean '01-scoring'?" in batch.stderr
    assert "Traceback" not in batch.stderr
    feedback = attn_grade(course, "feedback", "01-scorng")
    assert feedback.returncode == 1 and feedback.stdout == ""
    assert "did you mean '01-scoring'?" in feedback.stderr
    assert f"{course / 'autograded'}/*/01-scorng" in feedback.stderr
    report = attn_grade(course, "report", "01-scorng")
    assert report.returncode == 2
    assert "the gradebook has no lesson '01-scorng'; did you mean '01-scoring'?" in report.stderr
    # nothing of the mistake is left: no journal, no folder, the gradebook as it was
    assert not (course / ".attn-grade").exists()
    assert not (course / "autograded").exists() and not (course / "feedback").exists()
    assert digest(course / "gradebook.db") == before


@sandboxed
def test_a_lesson_nobody_has_submitted_says_so(course):
    batch = attn_grade(course, "batch", LESSON)
    assert batch.returncode == 1 and batch.stdout == ""
    assert f"{LESSON}: nobody has submitted it yet" in batch.stderr
    assert "did you mean" not in batch.stderr
    feedback = attn_grade(course, "feedback", LESSON)
    assert feedback.returncode == 1
    assert f"{LESSON}: no submission of it is graded yet" in feedback.stderr


@sandboxed
def test_submissions_of_a_lesson_the_gradebook_lacks_are_one_error_before_any_grading(tmp_path):
    """nbgrader fails every student of such a lesson with its traceback ("No assignment with
    ID ... exists in the database"); the batch says it once and grades nobody."""
    course = make_course(tmp_path, [OTHER])  # lesson 01 is in solutions/, not released
    submit(course, LESSON, "early", student_notebook(LESSON, {}))
    before = digest(course / "gradebook.db")
    batch = attn_grade(course, "batch", LESSON, "--json")
    assert batch.returncode == 2 and json.loads(batch.stdout) == []
    assert (
        f"the gradebook ({course / 'gradebook.db'}) has no lesson '{LESSON}': "
        f"release it first (`nbgrader generate_assignment {LESSON}`); its lessons: {OTHER}"
    ) in batch.stderr
    assert "Traceback" not in batch.stderr and "No assignment with ID" not in batch.stderr
    assert not (course / ".attn-grade").exists() and not (course / "autograded").exists()
    assert digest(course / "gradebook.db") == before
    (course / "gradebook.db").unlink()  # no gradebook at all: said, and not made
    again = attn_grade(course, "batch", LESSON)
    assert again.returncode == 2
    assert f"there is no gradebook at {course / 'gradebook.db'}: release it first" in again.stderr
    assert not (course / "gradebook.db").exists()


@sandboxed
def test_the_batch_looks_where_the_course_puts_submissions(tmp_path):
    """nbgrader's layout, not a guess: a course that keeps submissions in ``handed-in/`` is
    graded from there, and a typo is told where it was looked for."""
    course = make_course(
        tmp_path, [LESSON], '\nc.CourseDirectory.submitted_directory = "handed-in"\n'
    )
    path = submit(course, LESSON, "honest", student_notebook(LESSON, {}))
    (course / "handed-in").mkdir()
    path.parent.parent.rename(course / "handed-in" / "honest")
    (course / "submitted").rmdir()
    typo = attn_grade(course, "batch", "01-scorng")
    assert typo.returncode == 1 and f"{course / 'handed-in'}/*/01-scorng" in typo.stderr
    graded = attn_grade(course, "batch", LESSON, "--json")
    assert graded.returncode == 0, graded.stderr[-3000:]
    (result,) = json.loads(graded.stdout)
    assert result["student"] == "honest" and result["status"] == "graded"
    assert result["score"] == result["max_score"] > 0
