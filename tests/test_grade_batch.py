"""``attn-grade batch`` gives every student nbgrader's score, and nbgrader's tools still work.

Two copies of one scratch course (lessons 01 and 02, honest students and classic bugs from
tests/test_grade_students.py): ``nbgrader autograde`` grades one, ``attn-grade batch`` the other.
Every grade cell of every student must get the same score in both gradebooks. Then
``nbgrader generate_feedback`` and ``nbgrader export`` run on what attn-grade wrote.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest
from course import BIN, children, env, make_course, nbgrader
from nbgrader.api import Gradebook
from nbgrader.plugins import LateSubmissionPlugin
from test_grade_students import STUDENTS, student_notebook, submit, submit_all
from traitlets import Float
from traitlets.config import Config

from autograder import journal
from autograder.batch import own_code, penalty_rule
from autograder.journal import Journal

LESSONS = ["01-scoring", "02-softmax-masking"]
pytestmark = [pytest.mark.slow, pytest.mark.lesson01, pytest.mark.lesson02]


def attn_grade(course, *args, timeout=600):
    return subprocess.run(
        [str(BIN / "attn-grade"), *args], cwd=course, env=env(), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    ours = make_course(tmp_path_factory.mktemp("attn-grade-course"), LESSONS)
    for lesson in LESSONS:
        names = submit_all(ours, lesson)
        # files nbgrader leaves behind (CourseDirectory.ignore), where a run of the notebook or
        # of Python puts them: the batch must send its workers exactly what nbgrader copies
        for folder in (ours / "solutions" / lesson, ours / "submitted" / names[0] / lesson):
            (folder / ".hypothesis" / "constants").mkdir(parents=True, exist_ok=True)
            (folder / ".hypothesis" / "constants" / "0123abcd").write_text("[1, 2]\n")
            (folder / "__pycache__").mkdir(exist_ok=True)
            (folder / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\0" * 16)
    theirs = tmp_path_factory.mktemp("nbgrader-course")
    shutil.copytree(ours, theirs, dirs_exist_ok=True)
    runs = {}
    for lesson in LESSONS:
        done = nbgrader(theirs, "autograde", lesson)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[lesson] = attn_grade(ours, "batch", lesson, "--course", str(ours), "--json",
                                  "--csv", str(ours / f"{lesson}.csv"),
                                  "--log-level", "WARN")  # fmt: skip
        assert runs[lesson].returncode == 0, runs[lesson].stderr[-3000:]
    return ours, theirs, runs


def grades(course, lesson) -> dict[tuple[str, str], float]:
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for submission in gb.find_assignment(lesson).submissions:
            for nb in submission.notebooks:
                for grade in nb.grades:
                    out[(submission.student.id, grade.name)] = grade.score
    return out


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_workers_grade_every_notebook_and_the_main_process_none(courses, lesson):
    """The workers were sent each notebook with exactly the files nbgrader copies beside it
    (ignored ones left out), so nbgrader's loop finds every result ready: nothing is graded
    twice. And nothing is sanitized twice: nbgrader's loop takes each notebook as the batch
    sanitized it for the workers."""
    _, _, runs = courses
    assert "No prepared result" not in runs[lesson].stderr, runs[lesson].stderr[-3000:]
    assert "No notebook sanitized ahead" not in runs[lesson].stderr, runs[lesson].stderr[-3000:]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_grade_cell_gets_nbgrader_score(courses, lesson):
    ours, theirs, _ = courses
    a, b = grades(ours, lesson), grades(theirs, lesson)
    assert set(a) == set(b)
    differ = {key: (a[key], b[key]) for key in a if a[key] != b[key]}
    assert not differ, f"attn-grade vs nbgrader: {differ}"
    students = {student for student, _ in a}
    assert students == set(STUDENTS[lesson])
    totals = {s: sum(v for (who, _), v in a.items() if who == s) for s in students}
    assert totals["blank"] == 0 and totals["honest"] == max(totals.values())
    assert len(set(totals.values())) > 3, "the bugs should cost different points"


@pytest.mark.parametrize("lesson", LESSONS)
def test_json_and_csv_reports_agree_with_the_gradebook(courses, lesson):
    ours, _, runs = courses
    results = {r["student"]: r for r in json.loads(runs[lesson].stdout)}
    with Gradebook(f"sqlite:///{ours / 'gradebook.db'}") as gb:
        for student, r in results.items():
            assert r["status"] == "graded"
            assert r["score"] == gb.find_submission(lesson, student).score
    with open(ours / f"{lesson}.csv", newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(results)
    assert float(rows["honest"]["score"]) == results["honest"]["score"]


def test_a_student_who_asks_the_grader_for_gigabytes_is_graded_as_the_same_mistake_is(courses):
    """Its scaled_dot_scores calls dot_scores (wrong, so the course's stands in, run by the
    grader) on two arrays inside the bound on what a callback sends, whose product is 2 GiB.
    The grader's process may not take that for a function called back: a MemoryError, which
    the student's code catches. So it is graded as no-transpose is, cell by cell, both ways."""
    for course in courses[:2]:
        found = grades(course, "01-scoring")
        asked = {name: s for (who, name), s in found.items() if who == "asks-for-gigabytes"}
        same = {name: s for (who, name), s in found.items() if who == "no-transpose"}
        assert asked == same, course


def test_feedback_names_the_mistake_and_the_section(courses):
    ours, _, _ = courses
    lesson = "02-softmax-masking"
    text = (ours / "autograded" / "scale-dk" / lesson / "attn-feedback.md").read_text()
    assert "✗ **attention**" in text and "Reread: 02-softmax-masking, '" in text
    assert "sqrt(d_k)" in text
    honest = (ours / "autograded" / "honest" / lesson / "attn-feedback.md").read_text()
    assert "To fix" not in honest and "Score: **17 / 17**" in honest


def test_nbgrader_feedback_and_export_work_on_what_attn_grade_wrote(courses):
    ours, _, _ = courses
    lesson = "02-softmax-masking"
    done = nbgrader(ours, "generate_feedback", lesson)
    assert done.returncode == 0, done.stderr[-3000:]
    for student in STUDENTS[lesson]:
        folder = ours / "feedback" / student / lesson
        assert (folder / f"{lesson}.html").exists()
        assert (folder / "attn-feedback.md").exists()
    done = nbgrader(ours, "export")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(ours / "grades.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == lesson]
    by_student = {r["student_id"]: r for r in rows}
    assert set(STUDENTS[lesson]) <= set(by_student)
    assert float(by_student["honest"]["score"]) == float(by_student["honest"]["max_score"]) > 0
    assert float(by_student["blank"]["score"]) == 0


def test_a_second_run_grades_nobody_again(courses):
    ours, _, _ = courses
    lesson = "01-scoring"
    done = attn_grade(ours, "batch", lesson, "--course", str(ours), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert {r["status"] for r in json.loads(done.stdout)} == {"skipped"}


@pytest.mark.parametrize("lesson", LESSONS)
def test_both_ways_keep_every_verdict_in_the_course_history(courses, lesson):
    from autograder import history

    for course in courses[:2]:
        found = {e["student"]: e for e in history.entries(course, lesson)}
        assert set(found) == set(STUDENTS[lesson]), course
        scores = grades(course, lesson)
        for student, entry in found.items():
            assert entry["notebook"] == lesson and len(entry["submission"]) == 16
            for verdict in entry["verdicts"]:
                assert bool(verdict["mistake"]) != verdict["passed"], verdict
            failed = {v["name"] for v in entry["verdicts"] if not v["passed"]}
            lost = {cell for (who, cell), score in scores.items() if who == student and not score}
            assert {f"test_{name}" for name in failed} <= lost, (student, failed, lost)


# ---------------------------------------------------------------------------------------------
# attn-grade feedback: nbgrader's pages, several students at a time


def tree(folder) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and its permission bits, by relative path."""
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mode & 0o7777)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def with_feedback(courses, tmp_path_factory):
    """Lesson 01 as graded by attn-grade, copied twice: feedback by nbgrader in one copy, by
    ``attn-grade feedback`` on two workers in the other."""
    ours, _, _ = courses
    lesson = "01-scoring"
    by_nbgrader = tmp_path_factory.mktemp("feedback-nbgrader")
    by_us = tmp_path_factory.mktemp("feedback-attn-grade")
    for course in (by_nbgrader, by_us):
        shutil.copytree(ours, course, dirs_exist_ok=True, ignore=shutil.ignore_patterns("feedback"))
    done = nbgrader(by_nbgrader, "generate_feedback", lesson)
    assert done.returncode == 0, done.stderr[-3000:]
    run = attn_grade(by_us, "feedback", lesson, "--course", str(by_us), "--workers", "2", "--json")
    return by_nbgrader, by_us, run


def test_attn_grade_feedback_writes_nbgraders_pages_byte_for_byte(with_feedback):
    by_nbgrader, by_us, run = with_feedback
    lesson = "01-scoring"
    assert run.returncode == 0, run.stderr[-3000:]
    results = {r["student"]: r for r in json.loads(run.stdout)}
    assert set(results) == set(STUDENTS[lesson])
    assert {r["status"] for r in results.values()} == {"written"}
    theirs, ours = tree(by_nbgrader / "feedback"), tree(by_us / "feedback")
    assert sorted(ours) == sorted(theirs)
    for student in STUDENTS[lesson]:  # a page and the Markdown feedback, for every student
        assert f"{student}/{lesson}/{lesson}.html" in ours
        assert f"{student}/{lesson}/attn-feedback.md" in ours
    differ = [path for path in theirs if ours[path] != theirs[path]]
    assert not differ, f"not nbgrader's bytes or permissions: {differ}"


def test_attn_grade_feedback_skips_what_is_written_unless_forced(with_feedback):
    _, by_us, _ = with_feedback
    lesson = "01-scoring"
    before = tree(by_us / "feedback")
    page = by_us / "feedback" / "honest" / lesson / f"{lesson}.html"
    page.write_text("an instructor's edit")  # nbgrader keeps it: the page is not older
    again = attn_grade(by_us, "feedback", lesson, "--course", str(by_us), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {r["status"] for r in json.loads(again.stdout)} == {"skipped"}
    assert page.read_text() == "an instructor's edit"
    forced = attn_grade(by_us, "feedback", lesson, "--course", str(by_us), "--json", "--force")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert {r["status"] for r in json.loads(forced.stdout)} == {"written"}
    assert tree(by_us / "feedback") == before


def test_attn_grade_feedback_a_broken_or_odd_student_costs_only_that_student(
    with_feedback, tmp_path
):
    _, by_us, _ = with_feedback
    lesson = "01-scoring"
    course = tmp_path / "course"
    shutil.copytree(by_us, course, ignore=shutil.ignore_patterns("feedback"))
    broken = course / "autograded" / "no-eps" / lesson / f"{lesson}.ipynb"
    broken.unlink()  # nbgrader left it read-only
    broken.write_text('{"cells": [')  # cut short
    odd = course / "autograded" / "a[b]" / lesson  # nbgrader would read the name as a pattern
    shutil.copytree(course / "autograded" / "honest" / lesson, odd)
    done = attn_grade(course, "feedback", lesson, "--course", str(course), "--json")
    assert done.returncode == 1
    results = {r["student"]: r for r in json.loads(done.stdout)}
    assert results["no-eps"]["status"] == "error" and results["no-eps"]["error"]
    assert results["a[b]"]["status"] == "refused" and "pattern" in results["a[b]"]["error"]
    assert not (course / "feedback" / "a[b]").exists()
    assert not (course / "feedback" / "no-eps" / lesson / f"{lesson}.html").exists()
    others = set(STUDENTS[lesson]) - {"no-eps"}
    assert {results[s]["status"] for s in others} == {"written"}
    text = attn_grade(course, "feedback", lesson, "--course", str(course))
    assert text.returncode == 1
    assert "no-eps: error" in text.stdout and "a[b]: refused" in text.stdout


def test_attn_grade_feedback_gets_over_a_worker_killed_from_outside(courses, tmp_path):
    """As the system's out-of-memory killer would: ``kill -9`` of one of ``attn-grade
    feedback``'s workers as soon as it is there. The workers are started again, the pages they
    held sent again, one line says so, and every student's page is written."""
    ours, _, _ = courses
    lesson = "02-softmax-masking"
    course = tmp_path / "course"
    shutil.copytree(ours, course, ignore=shutil.ignore_patterns("feedback"))
    run = subprocess.Popen(
        [str(BIN / "attn-grade"), "feedback", lesson, "--course", str(course), "--workers", "2",
         "--json"], cwd=course, env=env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline, workers = time.monotonic() + 120, []
        while len(workers) < 2 and time.monotonic() < deadline and run.poll() is None:
            workers = [pid for pid, cmd in children(run.pid).items() if b"spawn_main" in cmd]
            time.sleep(0.02)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 0, err[-3000:]
    said = [line for line in err.splitlines() if "died" in line]
    assert len(said) == 1 and "restart 1 of the 3 a run gets" in said[0], err[-3000:]
    results = {r["student"]: r["status"] for r in json.loads(out)}
    assert results == dict.fromkeys(STUDENTS[lesson], "written")
    for student in STUDENTS[lesson]:
        assert (course / "feedback" / student / lesson / f"{lesson}.html").is_file()


@pytest.mark.parametrize("command", ["batch", "feedback", "report"])
def test_a_folder_that_is_no_course_is_one_clear_line_for_every_class_command(tmp_path, command):
    """Every command that opens a course's gradebook says plainly when its folder is not one,
    before it starts anything (no worker, no gradebook made there)."""
    folder = tmp_path / "not-a-course"
    (folder / "submitted" / "alice" / "01-scoring").mkdir(parents=True)
    done = attn_grade(tmp_path, command, "01-scoring", "--course", str(folder), timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip() == f"attn-grade: {folder} does not look like an nbgrader course"
    assert sorted(p.name for p in folder.iterdir()) == ["submitted"]  # nothing written there


DUE = "2026-01-01 00:00:00"
WHEN = {"on-time": "2025-12-31 23:00:00", "late": "2026-01-02 03:04:00",
        "late-wrong": "2026-01-01 00:00:30", "a-bit-late": "2026-01-01 00:00:30"}  # fmt: skip


def late_class(folder, lesson: str, edits: dict[str, dict], penalty: str | None):
    """A course of ``lesson`` due on :data:`DUE`, with one submission per student of ``edits``
    (its edits to the solution), submitted at the student's time in :data:`WHEN`."""
    course = make_course(folder, [lesson])
    if penalty:
        with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
            config.write(f"\nc.LateSubmissionPlugin.penalty_method = {penalty!r}\n")
    done = nbgrader(course, "db", "assignment", "add", lesson, f"--duedate={DUE} UTC")
    assert done.returncode == 0, done.stderr
    for student, edit in edits.items():
        submit(course, lesson, student, student_notebook(lesson, edit))
        claimed = WHEN[student]
        (course / "submitted" / student / lesson / "timestamp.txt").write_text(f"{claimed}.0 UTC")
    return course


def batch_json(course, lesson: str, *args: str) -> tuple[dict, str]:
    """``attn-grade batch --json``: each student's result, and what it said on stderr."""
    done = attn_grade(course, "batch", lesson, "--course", str(course), "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["student"]: r for r in json.loads(done.stdout)}, done.stderr


def exported(course, column: str = "score") -> dict[str, float]:
    """Each student's ``column`` in ``nbgrader export``'s CSV."""
    out = course.parent / "export.csv"
    assert nbgrader(course, "export", "--to", str(out)).returncode == 0
    with open(out, newline="") as f:
        return {row["student_id"]: float(row[column]) for row in csv.DictReader(f)}


def test_a_late_submission_shows_how_late_and_nbgraders_penalty_as_nbgrader_export_does(tmp_path):
    """With a due date and nbgrader's late penalty set, the batch's table, JSON and CSV give each
    student the grade ``nbgrader export`` gives (the raw score less the penalty) and how late
    they were, and a late student's ``attn-feedback.md`` says what the penalty took; a second
    run, which grades nobody again, shows the same."""
    lesson = "01-scoring"
    edits = {"on-time": {}, "late": {}, "late-wrong": STUDENTS[lesson]["scale-dk"]}
    course = late_class(tmp_path / "course", lesson, edits, penalty="zero")
    first = attn_grade(course, "batch", lesson, "--course", str(course), "--json",
                       "--csv", str(tmp_path / "batch.csv"))  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    results = {r["student"]: r for r in json.loads(first.stdout)}
    with open(tmp_path / "batch.csv", newline="") as f:
        written = {row["student"]: row for row in csv.DictReader(f)}
    for column in ("raw_score", "late_submission_penalty", "score"):
        theirs = exported(course, column)
        for student in edits:
            assert results[student][column] == float(written[student][column]), column
            assert results[student][column] == theirs[student], column
    full = results["on-time"]["max_score"]
    assert results["on-time"]["score"] == full and results["on-time"]["seconds_late"] == 0
    assert results["late"]["raw_score"] == full and results["late"]["score"] == 0
    assert results["late"]["seconds_late"] == (24 * 60 + 3 * 60 + 4) * 60
    assert 0 < results["late-wrong"]["raw_score"] < full and results["late-wrong"]["score"] == 0
    said = {s: (course / "autograded" / s / lesson / "attn-feedback.md").read_text() for s in edits}
    took = f"the late penalty takes {full:g} points, so this notebook counts **0 / {full:g}**"
    assert took in said["late"] and f"Score: **{full:g} / {full:g}**" in said["late"]
    assert "due date" not in said["on-time"]
    again = attn_grade(course, "batch", lesson, "--course", str(course))
    assert again.returncode == 0, again.stderr[-3000:]
    rows = {line.split()[0]: line for line in again.stdout.splitlines() if line[:1].isalpha()}
    assert rows["student"].split()[:4] == ["student", "score", "status", "late"]
    assert rows["late"].split()[:5] == ["late", f"0/{full:g}", "skipped", "1", "d"]
    assert f"3 h (-{full:g})" in rows["late"]
    assert "<1 min (-" in rows["late-wrong"] and "on-time" in rows
    assert rows["on-time"].split()[:3] == ["on-time", f"{full:g}/{full:g}", "skipped"]


def test_a_new_due_date_or_an_extension_grades_again_exactly_the_students_it_moves(tmp_path):
    """nbgrader decides a late penalty when it grades, from the due date then. A rerun of the
    batch grades again each student whose due date changed since (an extension, a new due date
    for the lesson), and nobody else, so the penalty follows the new date without ``--force``."""
    lesson = "01-scoring"
    edits = {"on-time": {}, "late": {}, "a-bit-late": {}}
    course = late_class(tmp_path / "course", lesson, edits, penalty="zero")

    first, _ = batch_json(course, lesson)
    full = first["on-time"]["max_score"]
    scores = {"on-time": full, "late": 0.0, "a-bit-late": 0.0}
    assert {s: r["score"] for s, r in first.items()} == scores == exported(course)

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "attention") as gb:
        gb.grant_extension(lesson, "late", days=2)
    second, said = batch_json(course, lesson)
    assert {s: r["status"] for s, r in second.items()} == {
        "on-time": "skipped", "late": "graded", "a-bit-late": "skipped"}  # fmt: skip
    assert "grading 1 student(s) again, whose due date changed" in said
    assert "late (2026-01-01 00:00 UTC → 2026-01-03 00:00 UTC)" in said
    assert second["late"]["problems"][0] == "graded again: a new due date"
    scores["late"] = full
    assert {s: r["score"] for s, r in second.items()} == scores == exported(course)
    assert second["late"]["late_submission_penalty"] == 0 and second["late"]["seconds_late"] == 0
    feedback = (course / "autograded" / "late" / lesson / "attn-feedback.md").read_text()
    assert "late penalty" not in feedback and f"Score: **{full:g} / {full:g}**" in feedback

    later = "2026-01-01 01:00:00"  # the lesson's due date moves an hour: everyone's moves
    assert (
        nbgrader(course, "db", "assignment", "add", lesson, f"--duedate={later} UTC").returncode
        == 0
    )
    third, said = batch_json(course, lesson)
    assert {r["status"] for r in third.values()} == {"graded"}
    assert "grading 3 student(s) again" in said
    assert "a-bit-late (2026-01-01 00:00 UTC → 2026-01-01 01:00 UTC)" in said
    assert "late (2026-01-03 00:00 UTC → 2026-01-03 01:00 UTC)" in said
    scores["a-bit-late"] = full
    assert {s: r["score"] for s, r in third.items()} == scores == exported(course)

    # Nothing moved since: nobody is graded again, and no worker is needed (a cluster out of
    # reach is not reached: nothing listens on port 9 here).
    fourth, said = batch_json(course, lesson, "--dask", "tcp://127.0.0.1:9")
    assert {r["status"] for r in fourth.values()} == {"skipped"} and "again" not in said
    assert {s: r["score"] for s, r in fourth.items()} == scores
    journal = course / ".attn-grade" / f"{lesson}.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    due = {line["student"]: line["due"] for line in lines}  # each student's last line
    assert due == {"on-time": later, "a-bit-late": later, "late": "2026-01-03 01:00:00"}
    # a journal written before the due date was kept: its students are taken as not moved
    journal.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "due"}) + "\n"
                               for line in lines))  # fmt: skip
    fifth, _ = batch_json(course, lesson)
    assert {r["status"] for r in fifth.values()} == {"skipped"}


def test_a_new_late_penalty_grades_again_exactly_the_students_who_were_late(tmp_path):
    """nbgrader's late penalty is decided when it grades, by the plugin configured then. When the
    configuration changes (here ``penalty_method`` from nbgrader's default "none" to "zero"), a
    rerun grades again each student who was late, and nobody on time; ``nbgrader export`` agrees."""
    lesson = "01-scoring"
    edits = {"on-time": {}, "late": {}, "late-wrong": STUDENTS[lesson]["scale-dk"]}
    course = late_class(tmp_path / "course", lesson, edits, penalty=None)

    first, _ = batch_json(course, lesson)  # no penalty configured: nbgrader's default takes nothing
    raw = {s: r["raw_score"] for s, r in first.items()}
    assert {s: r["score"] for s, r in first.items()} == raw == exported(course)
    assert first["late"]["seconds_late"] > 0 and first["on-time"]["seconds_late"] == 0

    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    second, said = batch_json(course, lesson)
    assert {s: r["status"] for s, r in second.items()} == {
        "on-time": "skipped", "late": "graded", "late-wrong": "graded"}  # fmt: skip
    assert (
        "grading 2 late student(s) again, as the late penalty changed since they were graded "
        "(LateSubmissionPlugin(penalty_method='none') → LateSubmissionPlugin(penalty_method="
        "'zero')): late; late-wrong" in said
    )
    assert second["late"]["problems"][0] == "graded again: a new late penalty"
    scores = {"on-time": raw["on-time"], "late": 0.0, "late-wrong": 0.0}
    assert {s: r["score"] for s, r in second.items()} == scores == exported(course)
    assert second["late"]["late_submission_penalty"] == raw["late"] > 0

    third, said = batch_json(course, lesson)  # nothing changed since: nobody is graded again
    assert {r["status"] for r in third.values()} == {"skipped"} and "again" not in said
    assert {s: r["score"] for s, r in third.items()} == scores
    # a journal written before the penalty was kept: its students are taken as not rerated
    journal = course / ".attn-grade" / f"{lesson}.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert {line["penalty"] for line in lines} == {
        "LateSubmissionPlugin(penalty_method='none')", "LateSubmissionPlugin(penalty_method='zero')"
    }  # fmt: skip
    journal.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "penalty"}) + "\n"
                               for line in lines))  # fmt: skip
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write('c.LateSubmissionPlugin.penalty_method = "none"\n')
    fourth, said = batch_json(course, lesson)
    assert {r["status"] for r in fourth.values()} == {"skipped"} and "again" not in said


DOCKED = """
from nbgrader.plugins import LateSubmissionPlugin
{moved}

class Docked(LateSubmissionPlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return {points}


c.AssignLatePenalties.plugin_class = Docked
"""


def test_a_fix_to_the_courses_own_penalty_plugin_grades_the_late_students_again(tmp_path):
    """A course's own late-penalty plugin (here in ``nbgrader_config.py``) whose code changes,
    its name and settings the same: a rerun grades again each student who was late, and nobody
    on time. The same code moved down its file is no change."""
    lesson = "01-scoring"
    edits = {"on-time": {}, "late": {}}
    course = late_class(tmp_path / "course", lesson, edits, penalty=None)
    config = course / "nbgrader_config.py"
    base = config.read_text(encoding="utf-8")

    config.write_text(base + DOCKED.format(moved="", points=1.0), encoding="utf-8")
    first, _ = batch_json(course, lesson)
    raw = {s: r["raw_score"] for s, r in first.items()}
    assert first["late"]["late_submission_penalty"] == 1.0
    assert first["on-time"]["late_submission_penalty"] == 0.0

    config.write_text(base + DOCKED.format(moved="", points=2.0), encoding="utf-8")  # the fix
    second, said = batch_json(course, lesson)
    assert {s: r["status"] for s, r in second.items()} == {"on-time": "skipped", "late": "graded"}
    assert "grading 1 late student(s) again, as the late penalty changed" in said
    assert second["late"]["problems"][0] == "graded again: a new late penalty"
    assert second["late"]["late_submission_penalty"] == 2.0
    assert {s: r["score"] for s, r in second.items()} == exported(course) == {
        "on-time": raw["on-time"], "late": raw["late"] - 2.0}  # fmt: skip

    moved = "\n# the course's late rule, as the syllabus states it\n" * 3
    config.write_text(base + DOCKED.format(moved=moved, points=2.0), encoding="utf-8")
    third, said = batch_json(course, lesson)
    assert {r["status"] for r in third.values()} == {"skipped"} and "again" not in said


class PerHour(LateSubmissionPlugin):
    """A plugin of an instructor's own: a point off per hour late."""

    per_hour = Float(1.0).tag(config=True)

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return self.per_hour * total_seconds_late / 3600


class Broken(LateSubmissionPlugin):
    def __init__(self, **kwargs):
        raise RuntimeError("no")


def test_the_late_penalty_rule_names_the_plugin_and_every_setting_that_changes_a_penalty():
    """What the journal keeps of the penalty: the class ``AssignLatePenalties`` builds and its
    configured values, so another plugin or another setting of it is a change, and the same
    configuration written again is not; a plugin that cannot be built is no known rule."""

    def rule(**sections) -> str | None:
        return penalty_rule(SimpleNamespace(config=Config(sections)))

    assert rule() == "LateSubmissionPlugin(penalty_method='none')"
    assert rule(LateSubmissionPlugin={"penalty_method": "zero"}) == (
        "LateSubmissionPlugin(penalty_method='zero')"
    )
    mine = {"plugin_class": PerHour}
    code = own_code(PerHour)
    assert re.fullmatch("[0-9a-f]{12}", code)
    assert rule(AssignLatePenalties=mine) == (
        f"PerHour(penalty_method='none', per_hour=1.0) code {code}"
    )
    assert rule(AssignLatePenalties=mine, PerHour={"per_hour": 0.5}) == (
        f"PerHour(penalty_method='none', per_hour=0.5) code {code}"
    )
    assert rule(AssignLatePenalties={"plugin_class": Broken}) is None

    # the code of a course's own plugin: what its methods do, not where they lie or its traits'
    # values (those are its settings, above)
    class Same(LateSubmissionPlugin):
        per_hour = Float(2.0).tag(config=True)

        def late_submission_penalty(self, student_id, score, total_seconds_late):
            return self.per_hour * total_seconds_late / 3600

    class Doubled(LateSubmissionPlugin):
        per_hour = Float(1.0).tag(config=True)

        def late_submission_penalty(self, student_id, score, total_seconds_late):
            return 2 * self.per_hour * total_seconds_late / 3600

    class Capped(PerHour):
        most = 5

    class CappedLower(PerHour):
        most = 4

    for klass in (Same, Doubled, Capped, CappedLower):
        klass.__qualname__ = "PerHour"
    assert own_code(Same) == code != own_code(Doubled)
    assert own_code(Capped) not in (code, own_code(CappedLower))
    assert own_code(LateSubmissionPlugin) == ""  # nbgrader's own

    # the same in every process: a set in the code is read in one order whatever the hash seed
    plugin = (
        "from nbgrader.plugins import LateSubmissionPlugin\n"
        "from autograder.batch import own_code\n"
        "class Listed(LateSubmissionPlugin):\n"
        "    def late_submission_penalty(self, student_id, score, total_seconds_late):\n"
        "        return 0 if student_id in {'ann', 'bo', 'cy', 'dee', 'eve'} else 1\n"
        "print(own_code(Listed))\n"
    )
    seen = {
        subprocess.run([str(BIN / "python"), "-c", plugin], capture_output=True, text=True,
                       env={**env(), "PYTHONHASHSEED": seed}, check=True).stdout
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(seen) == 1 and re.fullmatch("[0-9a-f]{12}\n", seen.pop())


def test_one_student_or_a_glob_of_them_is_graded_and_given_feedback_alone(tmp_path):
    """``--student`` (an id, or a glob as nbgrader's ``--student`` takes) grades only those
    students; with ``--force`` it grades them again and leaves everyone else's grade as it was.
    ``attn-grade feedback --student`` writes only their pages. An id that matches nobody says
    which students there are, the nearest first."""
    lesson = "01-scoring"
    course = make_course(tmp_path / "course", [lesson])
    for student in ("honest", "scale-dk", "no-eps"):
        submit(course, lesson, student, student_notebook(lesson, STUDENTS[lesson][student]))
    first, _ = batch_json(course, lesson)
    assert {r["status"] for r in first.values()} == {"graded"} and len(first) == 3

    def graded_at() -> dict[str, int]:
        found = course.glob(f"autograded/*/{lesson}/{lesson}.ipynb")
        return {path.parent.parent.name: path.stat().st_mtime_ns for path in found}

    before = graded_at()
    again, _ = batch_json(course, lesson, "--student", "scale-dk", "--force")
    assert {s: r["status"] for s, r in again.items()} == {"scale-dk": "graded"}
    assert again["scale-dk"]["score"] == first["scale-dk"]["score"] < first["honest"]["score"]
    after = graded_at()
    assert {s for s in before if after[s] != before[s]} == {"scale-dk"}
    globbed, _ = batch_json(course, lesson, "--student", "no-*")  # graded already: skipped
    assert {s: r["status"] for s, r in globbed.items()} == {"no-eps": "skipped"}
    assert graded_at() == after

    for command in ("batch", "feedback"):
        done = attn_grade(course, command, lesson, "--course", str(course), "--student", "sacle-dk")
        assert done.returncode == 1, done.stderr
        said = done.stderr.strip()
        assert said.startswith(f"attn-grade {command}: no student 'sacle-dk' in "), said
        assert said.endswith("did you mean 'scale-dk'? (its students: honest, no-eps, scale-dk)")
    done = attn_grade(course, "feedback", lesson, "--course", str(course), "--student", "honest",
                      "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["student"] for r in json.loads(done.stdout)] == ["honest"]
    assert sorted(p.name for p in (course / "feedback").iterdir()) == ["honest"]


def test_whether_a_rerun_grades_anyone_is_read_from_the_journal_and_sound_folders_alone(
    tmp_path, monkeypatch
):
    """Before it loads nbgrader, the batch asks the journal whether anyone is to be graded, to
    start its workers early (``journal.unfinished``). A graded student unchanged is done; a new
    file or a lost autograded notebook is not. A folder the batch refuses (a link to a folder
    elsewhere) needs no worker, graded before or not, and nothing behind the link is read."""
    lesson = "01-scoring"
    folder = tmp_path / "submitted" / "alice" / lesson
    folder.mkdir(parents=True)
    (folder / f"{lesson}.ipynb").write_text("{}")
    graded = tmp_path / "autograded" / "alice" / lesson
    graded.mkdir(parents=True)
    (graded / f"{lesson}.ipynb").write_text("{}")
    Journal(tmp_path, lesson).mark({"student": "alice", "status": "graded",
                                    "stamp": journal.stamp_of(folder)})  # fmt: skip
    assert not journal.unfinished(tmp_path, lesson)
    (folder / "notes.txt").write_text("changed")
    assert journal.unfinished(tmp_path, lesson)
    (folder / "notes.txt").unlink()
    (graded / f"{lesson}.ipynb").unlink()
    assert journal.unfinished(tmp_path, lesson)
    (graded / f"{lesson}.ipynb").write_text("{}")
    assert not journal.unfinished(tmp_path, lesson)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "submitted" / "bob").mkdir()
    (tmp_path / "submitted" / "bob" / lesson).symlink_to(elsewhere)
    (tmp_path / "autograded" / "bob" / lesson).mkdir(parents=True)  # as if graded before
    (tmp_path / "autograded" / "bob" / lesson / f"{lesson}.ipynb").write_text("{}")
    read = []
    stamp_of = journal.stamp_of
    monkeypatch.setattr(journal, "stamp_of", lambda path: read.append(path) or stamp_of(path))
    assert not journal.unfinished(tmp_path, lesson)
    shutil.rmtree(tmp_path / "autograded" / "bob")  # never graded: refused all the same
    assert not journal.unfinished(tmp_path, lesson)
    assert read and all(path.parent.name != "bob" for path in read), read
    (folder / "notes.txt").write_text("changed")  # alice, beside him, is still to be graded
    assert journal.unfinished(tmp_path, lesson)


def test_a_forced_student_is_graded_again_after_a_kill(tmp_path):
    """``--force --student`` forgets only those students, in the journal itself, so a batch
    killed before it reached them still grades them when it is run again."""
    journal = Journal(tmp_path, "01-scoring")
    for student in ("alice", "bob"):
        journal.mark({"student": student, "status": "graded", "stamp": "s"})
    journal.forget(["bob", "nobody"])
    reread = Journal(tmp_path, "01-scoring")
    assert reread.done("alice", "s") and not reread.done("bob", "s")
    assert "nobody" not in reread.entries
