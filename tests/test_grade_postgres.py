"""A course whose gradebook is a real PostgreSQL server, written by concurrent graders.

nbgrader keeps its gradebook wherever ``c.CourseDirectory.db_url`` points. A scratch course of
lessons 01 and 02 is graded into a PostgreSQL database by two ``attn-grade batch`` runs at once
(one per lesson, both writing the one gradebook) and, in a copy, into SQLite by two runs the
same way, all four at once: every grade cell of every student gets the same score both ways, and
the class report says the same of both. A new student looked up by two graders at the same
moment is created once and graded by both.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from course import BIN, env, make_course
from nbgrader.api import Gradebook, InvalidEntry
from servers import postgres
from test_grade_students import STUDENTS, student_notebook, submit

from autograder import view
from autograder.batch import ensure_student

LESSONS = ["01-scoring", "02-softmax-masking"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson01,
    pytest.mark.lesson02,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def grades(db_url: str) -> dict[tuple[str, str, str], float]:
    out = {}
    with Gradebook(db_url, "attention") as gb:
        for lesson in LESSONS:
            for submission in gb.find_assignment(lesson).submissions:
                for nb in submission.notebooks:
                    for grade in nb.grades:
                        out[(lesson, submission.student.id, grade.name)] = grade.score
    return out


def batch(course, lesson) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "attn-grade"), "batch", lesson, "--course", str(course), "--json",
         "--workers", "1"],
        cwd=course, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_postgresql_gradebook_with_concurrent_writers_gives_sqlites_scores(tmp_path):
    (tmp_path / "pg").mkdir()
    (tmp_path / "sqlite").mkdir()
    with postgres() as db_url:
        lite = make_course(tmp_path / "sqlite", LESSONS)
        pg = make_course(tmp_path / "pg", LESSONS, f"\nc.CourseDirectory.db_url = {db_url!r}\n")
        for lesson in LESSONS:
            for name, edits in list(STUDENTS[lesson].items())[:4]:  # honest, blank, two bugs
                for course in (lite, pg):
                    submit(course, lesson, name, student_notebook(lesson, edits))
        # two graders write the PostgreSQL gradebook at once; SQLite's run beside them
        runs = [batch(course, lesson) for course in (pg, lite) for lesson in LESSONS]
        for run in runs:
            out, err = run.communicate(timeout=900)
            assert run.returncode == 0, err[-3000:]
            assert {r["status"] for r in json.loads(out)} == {"graded"}

        theirs = grades(f"sqlite:///{lite / 'gradebook.db'}")
        ours = grades(db_url)
        reported = {"pg": report(pg), "sqlite": report(lite)}
    assert not (pg / "gradebook.db").exists()  # nothing went to SQLite by mistake
    assert ours == theirs and len(ours) > 20
    # the class report reads the PostgreSQL gradebook as it reads SQLite's
    assert reported["pg"] == reported["sqlite"]
    cells = {(lesson["lesson"], row["student"], cell): score
             for lesson in reported["pg"] for row in lesson["students"]
             for cell, score in row["cells"].items()}  # fmt: skip
    assert cells == ours


def report(course) -> list[dict]:
    """``attn-grade report --all --json``'s lessons, without when grading happened and how long
    it took."""
    done = subprocess.run(
        [str(BIN / "attn-grade"), "report", "--all", "--course", str(course), "--json"],
        cwd=course, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lessons = json.loads(done.stdout)["lessons"]
    for lesson in lessons:
        for row in lesson["students"]:
            del row["seconds"], row["seconds_total"]
        for row in lesson["attempts"]:
            del row["seconds"], row["graded"]
    return lessons


def test_a_student_another_grader_adds_at_the_same_moment_is_not_failed(tmp_path, monkeypatch):
    """Two graders writing one gradebook look a new student up at once, both miss, both insert.
    Here the other grader's insert is made to land between this grader's look and its insert
    (right after the look): nbgrader alone then fails the student; the batch finds the row."""
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    Gradebook(url, "attention").close()
    look = Gradebook.find_student
    raced: set[str] = set()

    def look_while_another_grader_inserts(self, student_id):
        try:
            return look(self, student_id)
        finally:
            if student_id not in raced:
                raced.add(student_id)
                with Gradebook(url, "attention") as other:
                    other.add_student(student_id)

    monkeypatch.setattr(Gradebook, "find_student", look_while_another_grader_inserts)
    with pytest.raises(InvalidEntry), Gradebook(url, "attention") as gb:
        gb.update_or_create_student("raced-by-nbgrader")
    ensure_student(url, "attention", "raced-by-the-batch")
    with Gradebook(url, "attention") as gb:
        assert sorted(s.id for s in gb.students) == ["raced-by-nbgrader", "raced-by-the-batch"]
