"""``attn-grade check NOTEBOOK``: the learner's self-check, in a child process with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import time

import nbformat
import pytest
from course import BIN, env
from test_grade_students import edit_cell, student_notebook

LESSON = "02-softmax-masking"
pytestmark = [pytest.mark.slow, pytest.mark.lesson02]


def check(path, *args, timeout=180):
    return subprocess.run(
        [str(BIN / "attn-grade"), "check", str(path), *args], env=env(), capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=timeout,
    )  # fmt: skip


def save(tmp_path, nb, name="mine", lesson=LESSON):
    """Save ``nb`` (or a file's text) as ``NAME/LESSON/LESSON.ipynb``."""
    folder = tmp_path / name / lesson
    folder.mkdir(parents=True)
    path = folder / f"{lesson}.ipynb"
    if isinstance(nb, str):
        path.write_text(nb)
    else:
        nbformat.write(nb, path)
    return path


def test_a_finished_notebook_passes_and_mastery_is_recorded(tmp_path):
    from attnlib import mastery

    done = check(save(tmp_path, student_notebook(LESSON, {})))
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("✓ softmax", "✓ attention", "✓ q1", "mastered (recorded)."):
        assert line in done.stdout
    assert mastery.best(LESSON).mastered  # written by the subprocess to $ATTN_COURSE_HOME
    assert "Problems running the notebook" not in done.stdout, done.stdout
    assert "ran in full" not in done.stdout  # no course cell was needed whole


def test_a_notebook_with_no_question_answered_records_no_mastery(tmp_path, monkeypatch):
    from attnlib import mastery

    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path / "home"))
    done = check(save(tmp_path, student_notebook(LESSON, "release")))  # halfway: nothing yet
    assert "Mastery: 0/6, not yet mastered (not recorded: no question answered yet)." in (
        done.stdout
    )
    assert mastery.best(LESSON) is None
    nb = student_notebook(LESSON, "release")
    edit_cell(nb, "answer_q4", 'q4 = "a"')  # one answer, wrong: an attempt
    done = check(save(tmp_path, nb, "later"), "--json")
    assert json.loads(done.stdout)["mastery"] == {
        "score": 0, "total": 6, "mastered": False, "recorded": True, "answered": True,
    }  # fmt: skip
    assert mastery.best(LESSON).score == 0


def test_an_answer_that_uses_a_course_cells_result_is_judged_as_grading_judges_it(tmp_path):
    # words, the running sentence's 10 words, is made by a course cell with str.split(): the
    # check runs that cell only for its set-up, unless an answer needs it, as this one does
    nb = student_notebook(LESSON, {"answer_q5": [("q5 = [0.0, 0.0, 0.0, 0.0]",
                                                  "q5 = [0.0] * (len(words) - 6)")]})  # fmt: skip
    done = check(save(tmp_path, nb), "--json", "--no-record")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert all(q["passed"] for q in report["questions"]), report["questions"]
    assert report["problems"] == [], report["problems"]
    (whole,) = report["ran_whole"]
    assert whole.startswith("the cell that begins 'import math'"), whole  # after magics, comment
    assert whole.endswith("(words)"), whole
    assert "so they ran in full:" in check(save(tmp_path, nb, "again"), "--no-record").stdout


@pytest.mark.lesson01
def test_an_answer_that_reads_a_value_a_course_cell_fills_is_judged_as_grading_judges_it(tmp_path):
    # lesson 01's cell of widths binds scores = {"unscaled": {}, "scaled": {}} (a literal: set-up)
    # and fills it in a loop that the set-up leaves out: graded, this answer is 1024 // 16 = 64,
    # right; read from the empty literal it was max() of nothing. The check forgets scores where
    # the loop stood, and runs the cell whole when the answer misses it
    lesson = "01-scoring"
    nb = student_notebook(
        lesson, {"answer_q2": [("q2 = 64", 'q2 = max(scores["unscaled"]) // 16')]}
    )
    done = check(save(tmp_path, nb, lesson=lesson), "--json", "--no-record")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert all(q["passed"] for q in report["questions"]), report["questions"]
    assert report["problems"] == [], report["problems"]
    # the cell that fills scores, and the one that binds rng, which that cell uses
    assert [w.rsplit(" (", 1)[1] for w in report["ran_whole"]] == ["rng)", "scores)"], report


def test_the_check_runs_the_notebook_as_grading_runs_it(tmp_path):
    # NBGRADER_EXECUTION is set as when graded, so a lesson that trains a model trains it briefly
    # in the check too (were a course cell that trains needed whole): what the learner's code
    # sees of it is what grading's run sees
    answer = 'import os\nq3 = -1 if os.environ.get("NBGRADER_EXECUTION") == "autograde" else 0'
    nb = student_notebook(LESSON, {"answer_q3": [("q3 = -1", answer)]})
    done = check(save(tmp_path, nb), "--json", "--no-record")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert all(q["passed"] for q in report["questions"]), report["questions"]


def test_a_course_cell_whose_set_up_fails_is_named_as_the_cause(tmp_path):
    nb = student_notebook(LESSON, {})
    (imports,) = [c for c in nb.cells if c.cell_type == "code" and "import numpy as np" in c.source]
    imports.source = "import attn_course_no_such_module\n" + imports.source  # before numpy
    done = check(save(tmp_path, nb), "--json", "--no-record")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    # numpy was never imported: the exercises fail, and the problems say where it started
    assert not any(e["passed"] for e in report["exercises"]), report["exercises"]
    # (the check runs the cell whole too, as np is a name it binds: the same error)
    assert report["problems"] == [
        "the cell that begins 'import attn_course_no_such_module': ModuleNotFoundError: No "
        "module named 'attn_course_no_such_module'"
    ], report["problems"]


def test_a_bug_is_named_without_showing_hidden_tests(tmp_path):
    nb = student_notebook(LESSON, {"attention": [("/ math.sqrt(d_k)", "/ d_k")]})
    done = check(save(tmp_path, nb), "--no-record")
    assert done.returncode == 1
    assert "✗ attention: scores scaled by d_k instead of sqrt(d_k)" in done.stdout
    assert "(Read: 02-softmax-masking, 'Scaled dot-product attention'.)" in done.stdout
    assert "✓ softmax" in done.stdout
    assert "HIDDEN" not in done.stdout and "check(" not in done.stdout
    assert "(not recorded)." in done.stdout  # --no-record is honoured and said so


def test_an_infinite_loop_cannot_hang_the_check_and_json_says_what_failed(tmp_path):
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "causal_mask", "def causal_mask(T):\n    while True:\n        pass\n")
    started = time.monotonic()
    done = check(save(tmp_path, nb), "--json", "--timeout", "2", "--no-record")
    assert time.monotonic() - started < 90
    assert done.returncode == 1
    report = json.loads(done.stdout)
    verdicts = {e["name"]: e for e in report["exercises"]}
    assert not verdicts["causal_mask"]["passed"]
    assert "longer than 2 s" in verdicts["causal_mask"]["message"]
    assert verdicts["softmax"]["passed"] and verdicts["attention"]["passed"]


def test_a_blank_release_fails_and_a_corrupted_file_is_a_clear_error(tmp_path):
    done = check(save(tmp_path, student_notebook(LESSON, "release")), "--no-record")
    assert done.returncode == 1
    assert "✗ softmax: not written yet: replace `raise NotImplementedError()`" in done.stdout
    assert "✗ q1: not answered yet: assign your answer to q1" in done.stdout
    assert "NotImplementedError:" not in done.stdout  # said once, in words, not as a traceback
    assert "masked_softmax: not written yet" in done.stdout  # not blamed on the unwritten softmax
    assert "in place of yours" not in done.stdout
    broken = tmp_path / "broken" / LESSON / f"{LESSON}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text("{ not a notebook")
    done = check(broken)
    assert done.returncode == 2 and "is not a readable notebook" in done.stderr


def test_attn_grade_skips_the_iri_grammars_and_notebooks_are_still_validated(tmp_path):
    """The CLI leaves jsonschema's slow "iri" checker unloaded (autograder.cli.skip_iri_grammars)
    and a notebook that breaks nbformat's schema is still refused, as nbformat refuses it."""
    broken = nbformat.v4.new_notebook()
    broken.cells.append(nbformat.v4.new_code_cell("x = 1"))
    broken.cells[0]["outputs"] = [{"output_type": "no such output"}]
    path = tmp_path / "broken.ipynb"
    path.write_text(json.dumps(broken), encoding="utf-8")
    probe = f"""
import sys
from autograder.cli import skip_iri_grammars
skip_iri_grammars()
import jsonschema, nbformat
try:
    nbformat.validate(nbformat.read({str(path)!r}, as_version=4))
    print("valid")
except nbformat.ValidationError:
    print("refused")
print("loaded" if sys.modules.get("rfc3987_syntax") else "absent")
"""
    # `make` removes rfc3987-syntax from the course's environment (the Makefile's SLOW_IMPORTS);
    # other environments have it. A stand-in with its one function is found first here, so
    # jsonschema imports it as it imports the real one unless the CLI keeps it out.
    stand_in = tmp_path / "site" / "rfc3987_syntax"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("def is_valid_syntax(rule, value):\n    return True\n")
    path_env = env(
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(stand_in.parent), os.environ.get("PYTHONPATH")])
        )
    )
    for skip, grammars in ((True, "absent"), (False, "loaded")):
        code = probe if skip else probe.replace("skip_iri_grammars()", "")
        done = subprocess.run([str(BIN / "python"), "-c", code], env=path_env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["refused", grammars], done.stdout


def test_a_check_does_not_load_nbgrader(tmp_path):
    """A learner's check reads the files beside the notebook without nbgrader's globs, so it
    never imports nbgrader (about a second of every check); it still hands them to the notebook."""
    reads = "assert open('notes.txt').read() == 'beside'  # the softmax needs its file\n"
    nb = student_notebook(LESSON, {"softmax": [("def softmax(", reads + "def softmax(")]})
    path = save(tmp_path, nb)
    (path.parent / "notes.txt").write_text("beside")
    probe = f"""
import sys
from autograder.cli import main
code = main(["check", {str(path)!r}, "--no-record", "--json"])
print(sorted({{name.split(".")[0] for name in sys.modules}} & {{"nbgrader", "nbconvert"}}))
"""
    done = subprocess.run([str(BIN / "python"), "-c", probe], env=env(), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    *report, loaded = done.stdout.strip().splitlines()
    assert loaded == "[]", loaded
    report = json.loads("\n".join(report))
    assert report["passed"], report


def test_cell_ids_repeated_in_every_cell_are_mended_quietly_as_grading_mends_them(tmp_path):
    # graded in full both ways, and not a line in the log, in test_grade_hostile.py
    from hostile import one_cell_id

    path = save(tmp_path, one_cell_id(student_notebook(LESSON, {})), "repeated")
    done = check(path, "--json", "--no-record")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert all(x["passed"] for x in report["exercises"] + report["questions"]), report
    assert report["repaired"] == [], report["repaired"]
    assert "Non-unique cell id" not in done.stderr and "DuplicateCellId" not in done.stderr


def test_course_cells_changed_by_accident_are_checked_as_grading_checks_them(tmp_path):
    # the accidents of tests/hostile.py, each graded in full both ways in test_grade_hostile.py
    from hostile import ACCIDENTS

    for name, (change, note) in ACCIDENTS.items():
        nb = student_notebook(LESSON, {})
        change(nb)
        done = check(save(tmp_path, nb, name), "--json", "--no-record")
        report = json.loads(done.stdout)
        assert done.returncode == 0, (name, report)
        assert all(x["passed"] for x in report["exercises"] + report["questions"]), name
        if name != "retyped-an-answer":  # a missing test cell: the check judges at the end
            assert any(note in r for r in report["repaired"]), (name, report["repaired"])
    shown = check(save(tmp_path, nb, "shown"), "--no-record").stdout
    assert "Course cells your notebook changed, checked as grading will check them:" not in shown
    nb = student_notebook(LESSON, {})
    ACCIDENTS["answer-cell-made-markdown"][0](nb)
    shown = check(save(tmp_path, nb, "markdown"), "--no-record").stdout
    assert "Course cells your notebook changed, checked as grading will check them:" in shown
    assert "press Y" in shown
