"""`pytest --attn-notebook PATH` checks a learner's notebook with the course's hidden checks."""

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

pytestmark = pytest.mark.lesson02

SOFTMAX_RIGHT = """def softmax(x, axis=-1):
    ### BEGIN SOLUTION
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
    ### END SOLUTION
"""
SOFTMAX_WRONG_AXIS = SOFTMAX_RIGHT.replace("axis=axis", "axis=0")


def solution(source, grade_id):
    return new_code_cell(source, metadata={"nbgrader": {
        "grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
        "solution": True, "task": False}})  # fmt: skip


def graded_cell(source, grade_id):
    return new_code_cell(source, metadata={"nbgrader": {
        "grade": True, "grade_id": grade_id, "locked": True, "points": 2, "schema_version": 3,
        "solution": False, "task": False}})  # fmt: skip


def notebook(tmp_path, *cells, lesson="02-softmax-masking"):
    """A notebook of ``lesson`` whose set-up cell also holds a literal, a print and a helper."""
    folder = tmp_path / lesson
    folder.mkdir(exist_ok=True)
    nb = new_notebook(cells=[
        new_markdown_cell("# A lesson"),
        new_code_cell("%matplotlib inline\nimport numpy as np\nBIG = 1e9\nprint(undefined_name)"),
        *cells,
    ])  # fmt: skip
    path = folder / "mine.ipynb"
    nbformat.write(nb, path)
    return path


def run_pytest(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def test_solutions_and_test_cells_run_and_only_the_set_up_of_the_rest(tmp_path):
    path = notebook(
        tmp_path,
        solution(SOFTMAX_RIGHT, "softmax"),
        graded_cell(
            "from attnlib.checks import report\nreport('softmax', softmax)", "test_softmax"
        ),
        new_code_cell("train_for_an_hour()\ndef helper():\n    return 3"),
    )
    result = run_pytest("--attn-notebook", str(path), "-k", "softmax and not masked", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout


def test_what_the_check_noticed_running_the_notebook_follows_the_verdicts(tmp_path):
    path = notebook(
        tmp_path,
        new_code_cell("import attn_course_no_such_module"),  # a course cell a learner changed
        solution(SOFTMAX_RIGHT, "softmax"),
    )
    result = run_pytest("--attn-notebook", str(path), "-k", "softmax and not masked", cwd=tmp_path)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout
    summary = result.stdout[result.stdout.index(f"attn-notebook: {path}") :]
    assert summary.splitlines()[1:3] == [
        "Problems running the notebook:",
        "  the cell that begins 'import attn_course_no_such_module' (not an exercise: the check "
        "runs its imports and definitions): ModuleNotFoundError: No module named "
        "'attn_course_no_such_module'",
    ], summary


def test_unknown_lessons_are_one_clear_failure(tmp_path):
    stray = notebook(tmp_path, lesson="misc")
    result = run_pytest("--attn-notebook", str(stray), cwd=tmp_path)
    assert result.returncode == 1 and "1 failed" in result.stdout
    assert "cannot tell which lesson" in result.stdout


def test_plugin_passes_a_right_answer_and_names_a_wrong_one(tmp_path):
    right = notebook(tmp_path, solution(SOFTMAX_RIGHT, "softmax"))
    result = run_pytest("--attn-notebook", str(right), "-k", "softmax and not masked", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout

    wrong = notebook(tmp_path, solution(SOFTMAX_WRONG_AXIS, "softmax"))
    result = run_pytest("--attn-notebook", str(wrong), "-k", "softmax and not masked", cwd=tmp_path)
    assert result.returncode == 1
    assert "softmax: softmax normalises over the first axis" in result.stdout
    assert "Traceback" not in result.stdout


def test_plugin_lists_every_exercise_and_question_of_the_lesson(tmp_path):
    from attnlib import checks, quiz

    path = notebook(tmp_path)
    result = run_pytest("--attn-notebook", str(path), "--collect-only", cwd=tmp_path)
    expected = [e.name for e in checks.LESSONS["02-softmax-masking"]]
    expected += [q.key for q in quiz.questions("02-softmax-masking")]
    for name in expected:
        assert f"mine.ipynb::{name}" in result.stdout
    assert "Warning" not in result.stdout

    # Without -q: the header says what is checked, and pytest counts the notebook's tests.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only"]
        + ["--attn-notebook", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert f"collected {len(expected)} items" in result.stdout, result.stdout
    assert "is lesson 02-softmax-masking: 5 exercises (softmax, causal_mask," in result.stdout
    assert "and 6 mastery questions (q1, q2, q3, q4, q5, q6)" in result.stdout


def test_plugin_reports_a_corrupted_notebook_as_one_clear_failure(tmp_path):
    broken = tmp_path / "02-softmax-masking" / "broken.ipynb"
    broken.parent.mkdir()
    broken.write_text("{ this is not json")
    result = run_pytest("--attn-notebook", str(broken), cwd=tmp_path)
    assert result.returncode == 1 and "1 failed" in result.stdout
    assert "is not a readable notebook" in result.stdout


# -- attacks on the plugin: the notebook runs in the grader's sandbox, never in pytest ---------

PATCHES_THE_CHECKS = """
import attnlib.checks, autograder.hidden, numpy
attnlib.checks.check = attnlib.checks.report = lambda *args, **kwargs: True
autograder.hidden.check = lambda *args, **kwargs: None
numpy.allclose = lambda *args, **kwargs: True
import sys, _pytest
sys.modules.get("_pytest.runner") and setattr(sys.modules["_pytest.runner"], "runtestprotocol",
                                               lambda *args, **kwargs: [])
"""


@pytest.mark.parametrize(
    "attack",
    [
        PATCHES_THE_CHECKS,
        "import os\nos._exit(0)",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)",
    ],
    ids=["patches-the-checks", "exits-its-process", "kills-its-parents"],
)
def test_a_wrong_answer_cannot_patch_or_end_its_way_past_the_plugin(tmp_path, attack):
    # a solution cell of its own: the plugin runs solution cells in full
    wrong = notebook(tmp_path, solution(SOFTMAX_WRONG_AXIS, "softmax"), solution(attack, "mine"))
    result = run_pytest("--attn-notebook", str(wrong), "-k", "softmax and not masked", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout
    assert "softmax: softmax normalises over the first axis" in result.stdout
