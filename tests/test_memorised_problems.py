"""An answer that looks its results up instead of computing them: a known hole, kept in view.

The checks draw the same problems everywhere (derandomised: the learner's test cell, Validate,
``attn-grade check``, the pytest plugin and the gradebook judge an answer on the same problems).
So a learner can learn them ahead: in their own kernel, hand ``attnlib.checks`` a spy around
``attnlib.numpy.softmax``, record every problem it is given with the right result, and submit a
``softmax`` that finds its argument in that table, saved beside the notebook (a file the
grader hands the sandbox, as it hands it any data file of the learner's). No line of it computes
a softmax, and it is not attnlib's code, so the copy check has nothing to compare.

A course closes it by grading with secret problems (``c.TrustedExecute.secret_problems``, or
``attn-grade batch --secret-problems N``; docs/grading.md, "Secret problems"): each grading draws
problems of its own from a seed kept on the trusted side, and the table has none of them. The
default draws none, for one verdict everywhere, so the first test says what should happen by
default and is expected to fail until the course decides otherwise; the others grade the table
with secret problems, beside the made-up students of tests/test_grade_students.py, whose
verdicts must be the same with and without them.
"""

from __future__ import annotations

import json
import pickle
import subprocess

import numpy as np
import pytest
from course import BIN, env, make_course, nbgrader
from test_grade_check import LESSON, check, save
from test_grade_students import STUDENTS, edit_cell, student_notebook, submit

from attnlib.checks._core import SECRET_NOTE
from autograder import history

pytestmark = [pytest.mark.slow, pytest.mark.lesson02]

LOOKUP = """import pickle

import numpy as np

_RESULTS = pickle.load(open("results.pkl", "rb"))


def softmax(x, axis=-1):
    x = np.asarray(x)
    return _RESULTS.get((x.dtype.str, x.shape, x.tobytes(), axis), np.zeros(x.shape))
"""


def recorded_results() -> dict:
    """Every problem the checks of softmax and the lesson's visible test cell give a right
    answer, with its result, as a learner's kernel can record them (it runs that cell too)."""
    from attnlib import checks
    from attnlib.numpy import softmax

    results = {}

    def spy(x, axis=-1):
        x = np.asarray(x)
        out = softmax(x, axis=axis)
        results[(x.dtype.str, x.shape, x.tobytes(), axis)] = np.array(out, copy=True)
        return out

    assert checks.check("softmax", spy)
    visible = next(
        cell.source
        for cell in student_notebook(LESSON, "release").cells
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax"
    )
    exec(visible, {"np": np, "softmax": spy})
    return results


def table_notebook():
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "softmax", LOOKUP)
    return nb


@pytest.mark.xfail(
    strict=True,
    reason="known hole by default: the checks' problems are the same everywhere, so they can be "
    "recorded ahead (docs/grading.md, 'Secret problems')",
)
def test_a_table_of_the_checks_own_problems_earns_nothing(tmp_path):
    path = save(tmp_path, table_notebook())
    (path.parent / "results.pkl").write_bytes(pickle.dumps(recorded_results()))
    done = check(path, "--no-record")
    assert "softmax" in done.stdout, done.stdout + done.stderr  # the check ran and reported it
    assert "✓ softmax\n" not in done.stdout, done.stdout


SECRET = "c.TrustedExecute.secret_problems = 10\n"  # the course's choice, in nbgrader_config.py


def batch(course, *args, lesson=LESSON):
    done = subprocess.run(
        [str(BIN / "attn-grade"), "batch", lesson, "--course", str(course), "--json",
         "--no-progress", *args],
        env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["student"]: r for r in json.loads(done.stdout)}, done.stderr


def last_verdicts(course, lesson=LESSON) -> dict[str, dict[str, tuple[bool, str]]]:
    """Each student's verdicts in their latest grading (the course history), by name."""
    latest = {e["student"]: e for e in history.entries(course, lesson)}
    return {student: {v["name"]: (v["passed"], v["message"]) for v in entry["verdicts"]}
            for student, entry in latest.items()}  # fmt: skip


@pytest.fixture(scope="module")
def secret_course(tmp_path_factory):
    """Lesson 02's made-up students and the table, in a course that grades with secret problems."""
    course = make_course(tmp_path_factory.mktemp("secret"), [LESSON], SECRET)
    for name, edits in STUDENTS[LESSON].items():
        submit(course, LESSON, name, student_notebook(LESSON, edits))
    table = submit(course, LESSON, "table", table_notebook())
    (table.parent / "results.pkl").write_bytes(pickle.dumps(recorded_results()))
    return course


def test_with_secret_problems_the_table_fails_and_every_other_verdict_is_the_same(secret_course):
    public, said = batch(secret_course, "--secret-problems", "0")  # the default: one verdict
    assert "secret problems" not in said
    before = last_verdicts(secret_course)
    assert "softmax" not in public["table"]["problems"]  # the hole, with no secret problems
    # The course's configuration (10 an exercise): everyone graded again, as the
    # students were graded without.
    secret, said = batch(secret_course)
    after = last_verdicts(secret_course)
    assert {r["status"] for r in secret.values()} == {"graded"}, secret
    assert f"grading {len(secret)} student(s) again, as secret problems were turned on" in said
    assert "grading with 10 secret problems an exercise" in said
    assert "graded again: secret problems turned on" in secret["honest"]["problems"]
    again, _ = batch(secret_course)  # nothing changed since: nobody graded again
    assert {r["status"] for r in again.values()} == {"skipped"}, again

    assert "softmax" in secret["table"]["problems"]
    passed, message = after["table"]["softmax"]
    assert not passed and message.endswith(SECRET_NOTE), message
    feedback = secret_course / "autograded" / "table" / LESSON / "attn-feedback.md"
    assert SECRET_NOTE.strip(" ()") in " ".join(feedback.read_text().split())
    others = set(STUDENTS[LESSON])
    assert {s: secret[s]["score"] for s in others} == {s: public[s]["score"] for s in others}
    assert {s: after[s] for s in others} == {s: before[s] for s in others}
    assert secret["honest"]["score"] == secret["honest"]["max_score"]


def test_nbgrader_autograde_grades_with_the_courses_secret_problems_too(secret_course):
    done = nbgrader(secret_course, "autograde", LESSON, "--student", "table", "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    passed, message = last_verdicts(secret_course)["table"]["softmax"]
    assert not passed and message.endswith(SECRET_NOTE), message
