"""``attn-grade report``: class analytics that agree with the gradebook, in JSON, CSV and a page.

A scratch course of lesson 02 whose gradebook is not where nbgrader puts it by default (the
course's ``nbgrader_config.py`` sets ``CourseDirectory.db_url``, as a PostgreSQL course would): a
few made-up students from tests/test_grade_students.py are graded with ``attn-grade batch``;
then ``scale-dk`` resubmits twice with the same mistake (only whitespace changes, so each is a new
submission) and is stuck, while ``wrong-axis`` resubmits once with its mistake and then fixes it,
and is not. ``in-sessions`` works through the lesson over three sessions and submits after each,
the last exercises and the mastery questions not begun every time: not stuck, counted as not
attempted. One student's id is markup that starts like a spreadsheet formula. The lesson has a
due date and nbgrader's late penalty "zero"; ``honest`` submitted a day and three hours late.
Every number of the report is compared with the gradebook (and the score after the late penalty
with ``nbgrader export``); the page is opened in Chromium.

The first tests need no grading: they check the rules (attempts, stuck, mastery) on made-up
history lines.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from html.parser import HTMLParser

import nbformat
import pytest
from course import BIN, env, make_course, nbgrader
from hostile import copy_below
from nbgrader.api import Gradebook
from test_grade_students import STUDENTS, student_notebook, submit

from attnlib.checks import NOT_WRITTEN
from attnlib.quiz import NOT_ANSWERED
from autograder import cli, history, report, spreadsheet
from autograder.report import Cell

LESSON = "02-softmax-masking"
# a student id that a spreadsheet would read as a formula, with what HTML escapes (an id holding
# < or " is refused: autograder/submission.py; the page's escaping of markup is tested above)
ODD = "=cmd o'brien & co >"
CLASS = {  # student → edits, from tests/test_grade_students.py
    "honest": {},
    "blank": "release",
    "wrong-axis": STUDENTS[LESSON]["wrong-axis"],
    "scale-dk": STUDENTS[LESSON]["scale-dk"],
    "causal-lt": STUDENTS[LESSON]["causal-lt"],
    ODD: STUDENTS[LESSON]["wrong-answers"],
}
SESSIONS = "in-sessions"  # writes the exercises in order, one session (and submission) at a time
WRITTEN = ["softmax", "causal_mask", "padding_mask"]  # its exercises written by the last session
MS = 1000


def slow(test):
    """A test of the graded class: it starts real grading (and perhaps Chromium)."""
    return pytest.mark.slow(pytest.mark.lesson02(pytest.mark.timeout(900)(test)))


# ---------------------------------------------------------------------------------------------
# the rules, on made-up history lines

CELLS = [
    Cell("test_softmax", "nb", "test_softmax", 2.0, False, ["softmax"]),
    Cell("test_q1", "nb", "test_q1", 1.0, True, ["q1"]),
]


def graded(student, submission, *mistakes):
    verdicts = [{"name": "softmax", "passed": False, "message": m, "mistake": m} for m in mistakes]
    verdicts = verdicts or [{"name": "softmax", "passed": True, "message": "", "mistake": ""}]
    return {"student": student, "notebook": "nb", "submission": submission, "seconds": 1.5,
            "verdicts": verdicts}  # fmt: skip


def test_a_regrade_is_not_an_attempt_and_stuck_needs_the_same_mistake_every_time():
    lines = [
        graded("same", "A", "wrong axis"), graded("same", "A", "wrong axis"),  # a regrade
        graded("same", "B", "wrong axis"), graded("same", "C", "wrong axis", "no shift"),
        graded("fixed", "A", "wrong axis"), graded("fixed", "B", "wrong axis"),
        graded("fixed", "C"),
        graded("other", "A", "wrong axis"), graded("other", "B", "no shift"),
        graded("other", "C", "wrong axis"),
        graded("back", "A", "wrong axis"), graded("back", "B", "wrong axis"),
        graded("back", "A", "wrong axis"),  # back to A: two distinct submissions, A the last
    ]  # fmt: skip
    attempts = report.attempts_of(lines, CELLS)
    assert {s: len(a) for s, a in attempts.items()} == {"same": 3, "fixed": 3, "other": 3,
                                                         "back": 2}  # fmt: skip
    assert [a.submission for a in attempts["back"]] == ["B", "A"]
    stuck = {s: report.stuck_on(a) for s, a in attempts.items()}
    assert stuck == {"same": [("test_softmax", "wrong axis")], "fixed": [], "other": [],
                     "back": []}  # fmt: skip
    assert report.stuck_on(attempts["back"], after=2) == [("test_softmax", "wrong axis")]

    rows = {(m.exercise, m.mistake): m for m in report.mistake_stats("L", attempts)}
    axis = rows[("test_softmax", "wrong axis")]
    assert (axis.students_now, axis.students_ever, axis.submissions) == (3, 4, 9)
    shift = rows[("test_softmax", "no shift")]
    assert (shift.students_now, shift.students_ever, shift.submissions) == (1, 2, 2)


def test_work_not_begun_is_counted_apart_and_never_makes_a_student_stuck():
    unwritten = history.mistake_key(NOT_WRITTEN)
    unanswered = history.mistake_key(NOT_ANSWERED.format(key="q1"))

    def line(student, submission, softmax, q1=""):
        verdicts = [{"name": "softmax", "passed": False, "message": softmax, "mistake": softmax}]
        if q1:
            verdicts.append({"name": "q1", "passed": False, "message": q1, "mistake": q1})
        return {"student": student, "notebook": "nb", "submission": submission, "seconds": 1.0,
                "verdicts": verdicts}  # fmt: skip

    lines = [
        *(line(who, x, unwritten, unanswered) for who in ("a", "b", "c") for x in "ABC"),
        *(line("stuck", x, "wrong axis") for x in "ABC"),
        line("began", "A", unwritten, unanswered), line("began", "B", "wrong axis"),
    ]  # fmt: skip
    attempts = report.attempts_of(lines, CELLS)
    assert report.not_begun(unwritten) and report.not_begun(unanswered)
    assert not report.not_begun("wrong axis") and not report.not_begun("raised NameError")
    assert {s: report.stuck_on(a) for s, a in attempts.items()} == {
        "a": [], "b": [], "c": [], "stuck": [("test_softmax", "wrong axis")], "began": [],
    }  # fmt: skip
    assert report.unbegun_by_cell(attempts) == {"test_softmax": 3, "test_q1": 3}

    mistakes = report.mistake_stats("L", attempts)
    assert [(m.mistake, m.students_now, m.not_attempted) for m in mistakes] == [
        ("wrong axis", 2, False), (unanswered, 3, True), (unwritten, 3, True),
    ]  # fmt: skip
    scores = {s: {"test_softmax": 0.0, "test_q1": 0.0} for s in attempts}
    exercises = [report.exercise_stats("L", c, scores, 3) for c in CELLS]
    lesson = report.LessonReport("L", CELLS, exercises, mistakes, [])
    assert [m.mistake for m in report.named(lesson)] == ["wrong axis"]
    assert not report.named(lesson, "test_q1")
    text = report.text_summary([lesson])
    assert "not attempted" in text and "wrong axis (2)" in text and "not written" not in text
    page = report.html_page("c", [lesson])
    assert "not written" not in page and "not answered" not in page
    assert page.count('<span class="not-attempted">3</span> not attempted') == 2


def test_mastery_is_eighty_percent_of_the_mastery_questions():
    assert report.mastered(5, 6) and report.mastered(4.8, 6) and report.mastered(0.8, 1)
    assert report.mastered(4, 6) is False and report.mastered(0, 0) is None
    assert report.is_mastery("test_q3", []) and not report.is_mastery("test_softmax", [])


def test_learner_text_is_escaped_in_the_page_and_defused_in_the_csv(tmp_path):
    student = report.StudentStats(
        "L", "<script>alert(1)</script>", 1.0, 3.0, {"test_softmax": 0.0, "test_q1": 1.0}, 1.0,
        1.0, True, 1, False, [], ["test_softmax: raised <b>Bold</b>"], 1.5, 1.5,
    )  # fmt: skip
    mistake = report.MistakeStats("L", "test_softmax", "could not be checked: (…)",
                                  'could not be checked: ("<img src=x>")', 1, 1, 1)  # fmt: skip
    lesson = report.LessonReport("L<i>", CELLS, [
        report.exercise_stats("L", c, {student.student: student.cells}) for c in CELLS
    ], [mistake], [student])  # fmt: skip
    student.set_back = [
        "a cell was labelled <u>mine</u> for nbgrader, which the lesson has no cell of"
    ]
    page = report.html_page("c", [lesson])
    for markup in ("<script>alert", "<b>Bold", "<img src=x>", "<i>", "<u>"):
        assert markup not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<img ") == 3 and "http" not in page.split("<body>")[1]
    student.student = "=HYPERLINK(1)"
    report.write_csv([lesson], tmp_path)
    with open(tmp_path / "students.csv", newline="") as f:
        assert next(csv.DictReader(f))["student"] == "'=HYPERLINK(1)"


def made_up_lesson(lesson, stuck="", set_back=""):
    """A lesson's report of three made-up students: one ``stuck``, one with course cells
    ``set_back`` (each optional), one neither."""

    def student(name):
        return report.StudentStats(
            lesson, name, 2.0, 3.0, {"test_softmax": 2.0, "test_q1": 0.0}, 0.0, 1.0, False, 3,
            name == stuck, ["test_softmax: wrong axis"] * (name == stuck), [], 1.0, 3.0,
            ["a cell was deleted"] * (name == set_back),
        )  # fmt: skip

    students = [student(name) for name in ("ann", "bo", "cy")]
    scores = {s.student: s.cells for s in students}
    exercises = [report.exercise_stats(lesson, c, scores) for c in CELLS]
    return report.LessonReport(lesson, CELLS, exercises, [], students)


class Links(HTMLParser):
    """The page's ids, and the targets of its in-page links."""

    def __init__(self, page):
        super().__init__()
        self.ids, self.targets, self.rows = set(), [], {}
        self.table = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.add(attrs.get("id"))
        if attrs.get("href", "").startswith("#"):
            self.targets.append(attrs["href"][1:])
        if tag == "table":
            self.table = attrs.get("class")
        if tag == "tr" and "data-student" in attrs:
            self.rows.setdefault(self.table, []).append(attrs["data-student"])


def test_several_lessons_get_contents_and_every_link_on_the_page_has_its_target():
    lessons = [made_up_lesson("01-scoring", stuck="bo"), made_up_lesson("02-softmax-masking")]
    links = Links(report.html_page("c", lessons))
    assert set(links.targets) <= links.ids and len(links.targets) == 2 + 2 * len(report.PARTS)
    assert links.targets[:2] == ["01-scoring", "02-softmax-masking"]  # the contents first
    assert links.rows["talk"] == ["bo"] and len(links.rows["students"]) == 6

    alone = Links(report.html_page("c", [made_up_lesson("L", stuck="ann", set_back="cy")]))
    assert len(alone.targets) == len(report.PARTS) and set(alone.targets) <= alone.ids
    assert alone.rows["talk"] == ["ann", "cy"]  # nobody else: "bo" is neither
    calm = report.html_page("c", [made_up_lesson("L")])
    assert '<table class="talk"' not in calm and "Nobody is stuck" in calm


# ---------------------------------------------------------------------------------------------
# a graded class


def attn_grade(course, *args, timeout=600):
    return subprocess.run(
        [str(BIN / "attn-grade"), *args], cwd=course, env=env(), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=timeout,
    )  # fmt: skip


def resubmit(course, student, edits, spaces, copied=""):
    """Submit ``edits`` again, with ``spaces`` trailing blanks in one cell: a new submission
    (with the cell ``copied`` copied below itself, tag and all, as JupyterLab copies)."""
    nb = student_notebook(LESSON, edits)
    cell = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "attention"
    )
    cell.source += " " * spaces
    if copied:
        copy_below(copied)(nb)
    submit(course, LESSON, student, nb)


def in_sessions(sessions: int) -> nbformat.NotebookNode:
    """The release with the first ``sessions`` exercises of WRITTEN written as the solutions
    write them; the rest not begun."""
    nb = student_notebook(LESSON, "release")
    solved = student_notebook(LESSON, {})
    written = WRITTEN[:sessions]
    sources = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solved.cells
               if c.metadata.get("nbgrader", {}).get("grade_id") in written}  # fmt: skip
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in sources:
            cell.source = sources.pop(grade_id)
    assert not sources
    return nb


def grade(course, workers=2):
    done = attn_grade(course, "batch", LESSON, "--course", str(course), "--json", "--no-progress",
                      "--workers", str(workers))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["student"]: r for r in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("report-course"), [LESSON])
    db = tmp_path_factory.mktemp("gradebook") / "attention.db"
    shutil.move(course / "gradebook.db", db)  # the course's own gradebook, elsewhere
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as f:
        f.write(f"\nc.CourseDirectory.db_url = {f'sqlite:///{db}'!r}\n")
        f.write('c.LateSubmissionPlugin.penalty_method = "zero"\n')
    assert nbgrader(course, "db", "assignment", "add", LESSON, f"--duedate={DUE}").returncode == 0
    for student, edits in CLASS.items():
        submit(course, LESSON, student, student_notebook(LESSON, edits))
    (course / "submitted" / "honest" / LESSON / "timestamp.txt").write_text(LATE)
    submit(course, LESSON, SESSIONS, in_sessions(1))
    assert {r["status"] for r in grade(course).values()} == {"graded"}

    resubmit(course, "scale-dk", CLASS["scale-dk"], 1)  # the same mistake, again
    resubmit(course, "wrong-axis", CLASS["wrong-axis"], 1)  # its mistake, again
    submit(course, LESSON, SESSIONS, in_sessions(2))  # one more exercise written
    again = {"scale-dk", "wrong-axis", SESSIONS}
    results = grade(course, workers=1)  # three students: one warm template is enough
    assert {s for s, r in results.items() if r["status"] == "graded"} == again
    resubmit(course, "scale-dk", CLASS["scale-dk"], 2)  # and again: stuck
    resubmit(course, "wrong-axis", {}, 1, copied="softmax")  # fixed; a cell copied by accident
    submit(course, LESSON, SESSIONS, in_sessions(3))  # and one more: not stuck
    last = grade(course, workers=1)
    assert {s for s, r in last.items() if r["status"] == "graded"} == again

    out = course.parent / "report"
    done = attn_grade(course, "report", "--all", "--course", str(course), "--json",
                      "--html", str(out / "report.html"), "--csv", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)  # --json: the report alone on stdout, what it wrote on stderr
    written = [out / "report.html", *(out / f"{t}.csv" for t in CSV_TABLES)]
    assert done.stderr.splitlines() == [f"wrote {path}" for path in written]
    assert not (course / "gradebook.db").exists()
    return {"course": course, "db": f"sqlite:///{db}", "data": data, "out": out, "last": last}


CSV_TABLES = ("exercises", "mistakes", "students", "attempts")
DUE = "2030-01-01 00:00:00 UTC"
LATE = "2030-01-02 03:04:00.0 UTC"  # honest's submission: 1 d 3 h 4 min after DUE


def gradebook(db_url):
    """student → grade cell → score; grade cell → max score; student → total."""
    scores, most, totals = {}, {}, {}
    with Gradebook(db_url) as gb:
        for cell in gb.find_notebook(LESSON, LESSON).grade_cells:
            most[cell.name] = cell.max_score
        for submitted in gb.find_assignment(LESSON).submissions:
            totals[submitted.student.id] = submitted.score
            for nb in submitted.notebooks:
                for g in nb.grades:
                    scores.setdefault(submitted.student.id, {})[g.name] = g.score
    return scores, most, totals


def lesson_of(data):
    (lesson,) = data["lessons"]
    assert lesson["lesson"] == LESSON
    return lesson


@slow
def test_every_score_in_the_report_is_the_gradebooks(graded_class):
    lesson = lesson_of(graded_class["data"])
    scores, most, totals = gradebook(graded_class["db"])
    students = {s["student"]: s for s in lesson["students"]}
    assert set(students) == set(scores) == {*CLASS, SESSIONS}
    for student, row in students.items():
        assert row["cells"] == scores[student]
        assert row["score"] == totals[student] == sum(scores[student].values())
        assert row["max_score"] == sum(most.values()) == 17
    export = graded_class["out"] / "export.csv"
    done = nbgrader(graded_class["course"], "export", "--to", str(export))
    assert done.returncode == 0, done.stderr[-3000:]
    with open(export, newline="") as f:
        exported = {row["student_id"]: row for row in csv.DictReader(f)}
    for student, row in students.items():
        theirs = exported[student]
        assert row["score"] == float(theirs["raw_score"])
        assert row["late_submission_penalty"] == float(theirs["late_submission_penalty"])
        assert row["score_after_penalty"] == float(theirs["score"])
    late = {s: (row["seconds_late"], row["late_submission_penalty"]) for s, row in students.items()}
    assert late.pop("honest") == ((24 * 60 + 3 * 60 + 4) * 60, 17)
    assert set(late.values()) == {(0, 0)} and lesson["summary"]["late"] == 1
    assert students["honest"]["score"] == 17 and students["honest"]["score_after_penalty"] == 0
    source = nbformat.read(graded_class["course"] / "solutions" / LESSON / f"{LESSON}.ipynb", 4)
    order = [c.metadata["nbgrader"]["grade_id"] for c in source.cells
             if c.metadata.get("nbgrader", {}).get("grade")]  # fmt: skip
    assert [e["exercise"] for e in lesson["exercises"]] == order == sorted(most, key=order.index)
    for e in lesson["exercises"]:
        got = [scores[s][e["exercise"]] for s in scores]
        full = sum(g == most[e["exercise"]] for g in got)
        zero = sum(g == 0 for g in got)
        assert (e["full"], e["zero"], e["partial"]) == (full, zero, len(got) - full - zero)
        assert e["distribution"] == {f"{v:g}": got.count(v) for v in sorted(set(got))}
        assert e["max_score"] == most[e["exercise"]]
        assert e["mastery"] == e["exercise"].startswith("test_q")


@slow
def test_mistakes_now_are_the_lost_points_and_counts_match_the_students(graded_class):
    lesson = lesson_of(graded_class["data"])
    scores, most, _ = gradebook(graded_class["db"])
    now = {s["student"]: s["mistakes_now"] for s in lesson["students"]}
    for student, mistakes in now.items():
        cells = {m.split(": ", 1)[0] for m in mistakes}
        lost = {cell for cell, score in scores[student].items() if score < most[cell]}
        assert cells == lost, student
    rows = {(m["exercise"], m["mistake"]): m for m in lesson["mistakes"]}
    for (cell, _), row in rows.items():
        assert row["students_now"] == sum(f"{cell}: {row['label']}" in m for m in now.values())
    on = {cell: {s for s, m in now.items() if any(x.startswith(f"{cell}: ") for x in m)}
          for cell in most}  # fmt: skip
    assert on["test_attention"] == {"blank", "scale-dk", SESSIONS}
    assert on["test_softmax"] == {"blank"} and on["test_causal_mask"] == {"blank", "causal-lt"}
    assert on["test_q1"] == on["test_q4"] == {"blank", ODD, SESSIONS}

    (scaled,) = [r for (cell, m), r in rows.items() if cell == "test_attention" and "d_k" in m]
    assert (scaled["students_now"], scaled["students_ever"], scaled["submissions"]) == (1, 1, 3)
    gone = [r for (cell, _), r in rows.items() if r["students_now"] == 0]
    # wrong-axis's softmax, fixed since (the exercises calling it were judged with the course's)
    assert {r["exercise"] for r in gone} == {"test_softmax"}
    assert all((r["students_ever"], r["submissions"]) == (1, 2) for r in gone)


@slow
def test_a_mistake_reads_as_its_diagnoses_say_it_everywhere(graded_class, capsys):
    # scale-dk's three submissions were told the same sentence: the report says it so, not as
    # its key with the particulars taken out ("sqrt(…)")
    lesson = lesson_of(graded_class["data"])
    told = {
        v["message"]
        for entry in history.entries(graded_class["course"], LESSON)
        if entry["student"] == "scale-dk"
        for v in entry["verdicts"]
        if v["grade_id"] == "test_attention" and not v["passed"]
    }
    (message,) = told
    (row,) = [m for m in lesson["mistakes"] if m["exercise"] == "test_attention"
              and message.startswith(m["label"])]  # fmt: skip
    assert "d_k" in row["label"] and "…" not in row["label"] and "#" not in row["label"]
    assert row["mistake"] == history.mistake_key(message) != row["label"]
    said = f"test_attention: {row['label']}"
    students = {s["student"]: s for s in lesson["students"]}
    assert students["scale-dk"]["stuck_on"] == [said]
    assert all(said in a["mistakes"] for a in lesson["attempts"] if a["student"] == "scale-dk")

    assert cli.main(["report", LESSON, "--course", str(graded_class["course"])]) == 0
    text = capsys.readouterr().out
    assert f"stuck: scale-dk ({said})" in text and row["mistake"] not in text
    page = (graded_class["out"] / "report.html").read_text(encoding="utf-8")
    named = page.split('<table class="mistakes">')[1].split("</table>")[0]
    assert f"<code>{row['label']}</code>" in named and row["mistake"] not in page
    # stuck on it (students to talk to, all students), and in each of the three attempts
    assert page.count(f"<code>{said}</code>") == 2 + 3


@slow
def test_only_the_student_with_the_same_mistake_three_times_is_stuck(graded_class):
    lesson = lesson_of(graded_class["data"])
    students = {s["student"]: s for s in lesson["students"]}
    assert {s for s, row in students.items() if row["stuck"]} == {"scale-dk"}
    (why,) = students["scale-dk"]["stuck_on"]
    assert why.startswith("test_attention: ") and "d_k" in why
    attempts = {s: row["attempts"] for s, row in students.items()}
    assert attempts == {**{s: 1 for s in CLASS}, "scale-dk": 3, "wrong-axis": 3, SESSIONS: 3}
    assert lesson["summary"]["stuck"] == 1 and lesson["stuck_after"] == report.STUCK_AFTER
    for row in students.values():
        assert 0 < row["seconds"] <= row["seconds_total"]
    assert students["scale-dk"]["seconds_total"] > students["scale-dk"]["seconds"]
    # each attempt in turn: the stuck student's mistake in every one; wrong-axis's gone at last
    tried = {}
    for row in lesson["attempts"]:
        tried.setdefault(row["student"], []).append(row)
    assert {s: [r["attempt"] for r in rows] for s, rows in tried.items()} == {
        s: list(range(1, n + 1)) for s, n in attempts.items()
    }
    assert all(why in row["mistakes"] for row in tried["scale-dk"])
    axis = [any(m.startswith("test_softmax: ") for m in r["mistakes"]) for r in tried["wrong-axis"]]
    assert axis == [True, True, False]
    for rows in tried.values():
        assert [r["graded"] for r in rows] == sorted(r["graded"] for r in rows)
        assert rows[-1]["seconds"] == students[rows[-1]["student"]]["seconds"]


@slow
def test_exercises_not_begun_are_counted_per_exercise_not_as_mistakes(graded_class, capsys):
    # in-sessions: three submissions, masked_softmax, attention and the questions never begun
    lesson = lesson_of(graded_class["data"])
    scores, most, _ = gradebook(graded_class["db"])
    begun = {
        "blank": set(),
        SESSIONS: {f"test_{name}" for name in WRITTEN},
    }  # the others answered everything (ODD two questions wrongly)
    for e in lesson["exercises"]:
        want = {s for s, cells in begun.items() if e["exercise"] not in cells}
        assert all(scores[s][e["exercise"]] == 0 for s in want)
        assert e["not_attempted"] == len(want), e["exercise"]
    students = {s["student"]: s for s in lesson["students"]}
    assert not students[SESSIONS]["stuck"] and students[SESSIONS]["attempts"] == 3
    assert any(m.startswith("test_attention: not written yet") for m in
               students[SESSIONS]["mistakes_now"])  # fmt: skip
    flagged = {(m["exercise"], m["mistake"]) for m in lesson["mistakes"] if m["not_attempted"]}
    assert flagged and all(report.not_begun(m) for _, m in flagged)
    assert [m["not_attempted"] for m in lesson["mistakes"]] == sorted(
        m["not_attempted"] for m in lesson["mistakes"]
    )  # the named mistakes first

    assert cli.main(["report", LESSON, "--course", str(graded_class["course"])]) == 0
    (row,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith(
        "test_attention ")]  # fmt: skip
    assert row.split()[5] == "2" and "d_k" in row  # 2 not attempted; the top mistake: scale-dk's
    page = (graded_class["out"] / "report.html").read_text(encoding="utf-8")
    named = page.split('<table class="mistakes">')[1].split("</table>")[0]
    assert "d_k" in named and "not written" not in named and "not answered" not in named


@slow
def test_a_student_whose_course_cells_were_set_back_is_named_with_what(graded_class):
    # wrong-axis's last submission has its softmax cell copied, tag and all (autograder/cells.py)
    lesson = lesson_of(graded_class["data"])
    students = {s["student"]: s for s in lesson["students"]}
    (note,) = students["wrong-axis"]["set_back"]
    assert note.startswith(
        "cell softmax appears 2 times (a copy keeps nbgrader's label of the original)"
    )
    assert [s for s, row in students.items() if row["set_back"]] == ["wrong-axis"]
    assert lesson["summary"]["set_back"] == 1
    assert students["wrong-axis"]["score"] == 17  # graded in full


@slow
def test_the_batch_reports_each_students_own_grading_time_as_the_report_does(graded_class):
    """The batch's seconds (its table, ``--json``, ``--csv``) are the time a student's notebook
    took to grade, the report's number for that submission: not the time its result waited in
    the batch for the students nbgrader's loop writes before it."""
    students = {s["student"]: s for s in lesson_of(graded_class["data"])["students"]}
    for name in ("scale-dk", "wrong-axis"):  # graded one after the other by the last batch
        assert graded_class["last"][name]["seconds"] == pytest.approx(
            students[name]["seconds"], abs=0.002
        ), name


@slow
def test_mastery_flags_follow_the_mastery_questions_in_the_gradebook(graded_class):
    lesson = lesson_of(graded_class["data"])
    scores, most, _ = gradebook(graded_class["db"])
    questions = [cell for cell in most if cell.startswith("test_q")]
    assert len(questions) == 6
    for row in lesson["students"]:
        got = sum(scores[row["student"]][q] for q in questions)
        assert row["mastery_score"] == got and row["mastery_max"] == 6
        assert row["mastered"] == (got >= 0.8 * 6)
    flags = {row["student"]: row["mastered"] for row in lesson["students"]}
    assert flags["honest"] and flags["scale-dk"] and not flags["blank"] and not flags[ODD]
    assert lesson["summary"]["mastered"] == sum(flags.values())


@slow
def test_csv_tables_text_summary_and_one_lesson_agree_with_the_json(graded_class, capsys):
    lesson = lesson_of(graded_class["data"])
    out = graded_class["out"]
    tables = {}
    for name in CSV_TABLES:
        with open(out / f"{name}.csv", newline="", encoding="utf-8") as f:
            tables[name] = list(csv.DictReader(f))
        assert len(tables[name]) == len(lesson[name])
    students = {row["student"]: row for row in tables["students"]}
    assert "'" + ODD in students  # no formula for a spreadsheet
    assert float(students["honest"]["score"]) == 17 and students["scale-dk"]["stuck"] == "True"

    assert cli.main(["report", LESSON, "--course", str(graded_class["course"])]) == 0
    text = capsys.readouterr().out
    assert f"{LESSON}: 7 students" in text and "1 stuck, 1 late" in text
    assert "stuck: scale-dk (test_attention: " in text
    assert "course cells set back: wrong-axis (cell softmax appears 2 times" in text
    course_id, (one,) = report.build(graded_class["course"], [LESSON])
    assert course_id == "attention" and one.as_dict() == lesson


def test_the_report_reads_the_course_beside_another_nbgrader_app_in_the_process(graded_class):
    from nbgrader.apps.autogradeapp import AutogradeApp

    AutogradeApp.instance()  # nbgrader's process-wide app, held by someone else (a batch, a hub)
    try:
        course_id, (one,) = report.build(graded_class["course"], [LESSON])
    finally:
        AutogradeApp.clear_instance()
    assert course_id == "attention" and one.as_dict() == lesson_of(graded_class["data"])


@slow
def test_the_page_renders_with_its_plots_and_the_gradebooks_numbers(graded_class, chromium):
    from browser import launched
    from playwright.sync_api import expect

    scores, most, totals = gradebook(graded_class["db"])
    page_file = graded_class["out"] / "report.html"
    with launched(chromium) as browser:
        page = browser.new_page()
        page.set_default_timeout(30 * MS)  # as the other browser tests: the suite loads 2 cores
        problems, dialogs, requests = [], [], []
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri(), wait_until="load")

        assert LESSON in page.title() and "attention" in page.title()
        expect(page.locator("h1")).to_contain_text("Class report")
        tables = page.locator("table.exercise-table")
        exercises = [e["exercise"] for e in lesson_of(graded_class["data"])["exercises"]]
        assert sorted(exercises) == sorted(most)
        expect(tables).to_have_count(len(most))
        for n, exercise in enumerate(exercises):
            expect(tables.nth(n)).to_have_attribute("data-exercise", exercise)
        zeros = tables.and_(page.locator("[data-exercise='test_attention']"))
        want = sum(scores[s]["test_attention"] == 0 for s in scores)
        expect(zeros.locator("tr[data-score='0'] td").nth(1)).to_have_text(str(want))

        plots = page.locator("img.plot")
        assert plots.count() == 3 == page.locator("img").count()
        for n in range(plots.count()):
            assert plots.nth(n).evaluate("i => i.complete && i.naturalWidth > 0")
            assert plots.nth(n).get_attribute("src").startswith("data:image/png;base64,")

        for student in ("honest", "scale-dk", ODD):
            row = page.locator("table.students tr").filter(
                has=page.get_by_role("cell", name=student, exact=True)
            )
            expect(row.locator("td.score")).to_have_text(f"{totals[student]:g}")
        late = page.locator("table.students td.late")
        expect(late).to_have_count(len(totals))
        expect(page.locator("tr[data-student='honest'] td.late")).to_have_text("1 d 3 h (-17)")
        assert sorted(late.all_inner_texts()) == [""] * (len(totals) - 1) + ["1 d 3 h (-17)"]
        expect(page.locator("[data-stat='late'] b")).to_have_text("1")
        set_back = page.locator("table.students tr[data-student='wrong-axis'] td.set-back")
        expect(set_back).to_contain_text("cell softmax appears 2 times")
        stuck = page.locator("table.students tr.stuck")
        expect(stuck).to_have_count(1)
        expect(stuck.locator("td").first).to_have_text("scale-dk")
        talk = page.locator("table.talk tr[data-student]")  # stuck, or course cells set back
        expect(talk).to_have_count(2)
        expect(talk.nth(0).locator("td.stuck-on")).to_contain_text("test_attention: ")
        expect(talk.nth(1).locator("td.set-back")).to_contain_text("cell softmax appears 2 times")
        assert [talk.nth(n).get_attribute("data-student") for n in range(2)] == [
            "scale-dk", "wrong-axis"]  # fmt: skip
        tried = page.locator("table.attempts tr[data-student='scale-dk']")
        expect(tried).to_have_count(3)  # the stuck student's attempts, and nobody else's
        expect(page.locator("table.attempts tr[data-student]")).to_have_count(3)
        for n in range(3):
            expect(tried.nth(n).locator("td.mistakes")).to_contain_text("test_attention: ")
        mean = sum(totals.values()) / len(totals)
        expect(page.locator("[data-stat='mean score'] b")).to_have_text(f"{round(mean, 2):g} / 17")

        # What holds the class back and who needs help come first; every student's row last.
        headings = page.locator(f"section[id='{LESSON}'] > h3")
        assert headings.all_inner_texts() == [h for _, h in report.PARTS]
        tops = [page.locator(f"table.{t}").first.bounding_box()["y"]
                for t in ("mistakes", "talk", "exercise-table", "students")]  # fmt: skip
        assert tops == sorted(tops), tops
        for n, (part, _) in enumerate(report.PARTS):  # the section's links reach its parts
            page.locator(f"section[id='{LESSON}'] nav a").nth(n).click()
            target = page.locator(f"[id='{report.anchor(LESSON, part)}']")
            expect(target).to_be_in_viewport()
        page.screenshot(path=str(graded_class["out"] / "report.png"), full_page=True)
    assert not dialogs and not problems, (dialogs, problems)
    assert all(url.startswith(("file:", "data:")) for url in requests), requests


@pytest.mark.filterwarnings("ignore:Object of type <SubmittedAssignment> not in session")
def test_an_extension_to_a_lesson_without_a_due_date_is_not_late(tmp_path):
    """nbgrader adds an extension to the lesson's due date, and raises when there is none; the
    report and the batch's due dates take such a student as on time, with no due date."""
    import datetime

    from autograder.batch import due_dates

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url, "attention") as gb:
        gb.add_assignment(LESSON)
        gb.add_student("alice")
        gb.update_or_create_submission(LESSON, "alice", timestamp=datetime.datetime(2026, 1, 2, 12))
        gb.grant_extension(LESSON, "alice", days=1)
        with pytest.raises(TypeError):
            gb.find_submission(LESSON, "alice").total_seconds_late  # noqa: B018 — nbgrader's own
        assert report.lateness_of(gb, LESSON) == {"alice": (0.0, 0.0)}
        gb.find_assignment(LESSON).duedate = datetime.datetime(2026, 1, 1)
        gb.db.commit()
        assert report.lateness_of(gb, LESSON) == {"alice": (12 * 3600.0, 0.0)}  # due the 2nd

    class Course:
        db_url, course_id = url, "attention"

    assert due_dates(Course, LESSON)("alice") == "2026-01-02 00:00:00"
    assert due_dates(Course, LESSON)("bob") == "2026-01-01 00:00:00"
    with Gradebook(url, "attention") as gb:
        gb.find_assignment(LESSON).duedate = None
        gb.db.commit()
    assert due_dates(Course, LESSON)("alice") is None


@pytest.mark.filterwarnings("ignore:Object of type <Submitted")  # nbgrader's add_submission
def test_a_cell_nbgrader_has_no_score_for_is_not_graded_until_someone_grades_it(tmp_path):
    """A notebook the autograder could not grade leaves nbgrader a submission whose cells have no
    score (it counts them as 0, and formgrader shows them as needing a manual grade): the report
    takes such a student as not graded, not as 0, and leaves them out of the distributions; a
    cell graded by hand counts, and the cells still without a score are named."""
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url, "attention") as gb:
        gb.add_assignment(LESSON)
        gb.add_notebook(LESSON, LESSON)
        for name, points in (("test_softmax", 2), ("test_q1", 1)):
            gb.add_grade_cell(name, LESSON, LESSON, max_score=points, cell_type="code")
        for student in ("alice", "bob"):
            gb.add_student(student)
            gb.add_submission(LESSON, student)
        for name in ("test_softmax", "test_q1"):  # alice was autograded: right, then wrong
            gb.find_grade(name, LESSON, LESSON, "alice").auto_score = {"test_q1": 0}.get(name, 2)
        gb.db.commit()
        assert gb.find_submission(LESSON, "bob").score == 0  # nbgrader's 0 for no score
        cells = report.cells_of(gb, LESSON, {})
        scores, unscored = report.scores_of(gb, LESSON, cells)
        assert scores == {"alice": {"test_softmax": 2.0, "test_q1": 0.0}}
        assert unscored == {"bob": ["test_softmax", "test_q1"]}
        why = "NotJSONError: not a notebook"
        bob = report.student_stats(
            LESSON, "bob", cells, None, [], unscored=unscored["bob"], why=why
        )
        assert (bob.score, bob.mastered, bob.score_after_penalty) == (None, None, None)
        assert report.not_graded(bob) == "no score for any cell: NotJSONError: not a notebook"
        (q1,) = [cell for cell in cells if cell.key == "test_q1"]
        zeros = report.exercise_stats(LESSON, q1, scores)
        assert (zeros.exercise, zeros.students, zeros.zero) == ("test_q1", 1, 1)  # alice alone

        gb.find_grade("test_softmax", LESSON, LESSON, "bob").manual_score = 1.5  # by hand
        gb.db.commit()
        scores, unscored = report.scores_of(gb, LESSON, cells)
        assert scores["bob"] == {"test_softmax": 1.5} and unscored == {"bob": ["test_q1"]}
        bob = report.student_stats(LESSON, "bob", cells, scores["bob"], [], unscored=["test_q1"])
        assert bob.score == 1.5 and bob.not_graded == ["test_q1"]
        assert report.not_graded(bob).startswith("no score for test_q1: the autograder could not")


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1+2", "@SUM(1)", "\t=1", "\r=1"])
def test_a_text_cell_a_spreadsheet_would_run_is_written_as_text(tmp_path, text):
    """Every CSV the course writes for an instructor (the batch's grades, the report's tables)
    goes through ``spreadsheet.write``: a cell that starts like a formula starts with ``'``;
    numbers, booleans and other text are written as they are."""
    path = tmp_path / "t.csv"
    spreadsheet.write(path, ["a", "b", "c", "d"], [[text, "plain", 1.5, True]])
    with open(path, newline="", encoding="utf-8") as f:
        assert list(csv.reader(f))[1] == ["'" + text, "plain", "1.5", "True"]
