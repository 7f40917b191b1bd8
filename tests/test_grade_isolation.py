"""A submission can hurt nobody but itself: hostile students in ONE batch with honest ones.

One scratch course, lesson 02, graded once by ``attn-grade batch`` (a real run of the CLI, real
nbgrader gradebook). Each hostile student is the honest source notebook with one solution cell
rewritten; the tests below read the gradebook and the files afterwards.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from course import BIN, env, make_course
from nbgrader.api import Gradebook
from test_grade_students import edit_cell, student_notebook, submit

LESSON = "02-softmax-masking"
pytestmark = [pytest.mark.slow, pytest.mark.lesson02]

SOFTMAX = """def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
"""
PADDING = """def padding_mask(lengths, max_len):
    lengths = np.asarray(lengths)
    return (np.arange(max_len)[None, :] < lengths[:, None])[:, None, :]
"""
CAUSAL = """def causal_mask(T):
    return np.arange(T)[None, :] <= np.arange(T)[:, None]
"""

# student -> (cells to rewrite {grade_id: source}, expected points lost {test cell: points})
HOSTILE = {
    "loop": ({"causal_mask": "def causal_mask(T):\n    while True:\n        pass\n"},
             {"test_causal_mask": 2}),
    "loop-ignoring-sigint": (
        {"padding_mask": "import signal\n\ndef padding_mask(lengths, max_len):\n"
                         "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                         "    while True:\n        pass\n"},
        {"test_padding_mask": 2}),
    "os-exit": ({"attention": "import os\n\ndef attention(Q, K, V, mask=None):\n"
                              "    os._exit(3)\n"},
                {"test_attention": 3}),
    "sys-exit": ({"causal_mask": "import sys\n\ndef causal_mask(T):\n    sys.exit(3)\n"},
                 {"test_causal_mask": 2}),
    "kill-parent": ({"padding_mask": PADDING + "\nimport os, signal\ntry:\n"
                                     "    os.kill(os.getppid(), signal.SIGKILL)\n"
                                     "except OSError as error:\n    print(error)\n"}, {}),
    "memory-bomb": ({"padding_mask": "def padding_mask(lengths, max_len):\n"
                                     "    hog = [bytearray(64 * 2**20) for _ in range(100_000)]\n"
                                     "    return hog\n"},
                    {"test_padding_mask": 2}),
    "print-50mb": ({"causal_mask": CAUSAL + 'print("x" * 50_000_000)\n'}, {}),
    "patches-numpy": (
        {"softmax": "def softmax(x, axis=-1):\n    x = np.asarray(x, dtype=float)\n"
                    "    return np.ones_like(x) / x.shape[axis]\n\n"
                    "np.allclose = lambda *a, **k: True\n"
                    "np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(a, b).shape, bool)\n"
                    "np.array_equal = lambda *a, **k: True\n"
                    "np.testing.assert_allclose = lambda *a, **k: None\n"
                    "import autograder.hidden\n"
                    "autograder.hidden.check = lambda *a, **k: None\n"},
        {"test_softmax": 2, "test_masked_softmax": 2, "test_attention": 3}),
    "lying-array": (
        {"causal_mask": "class Liar(np.ndarray):\n"
                        "    def __eq__(self, other):\n        return True\n\n"
                        "    def __array_function__(self, func, types, args, kwargs):\n"
                        "        return True\n\n"
                        "def causal_mask(T):\n    return np.zeros((T, T), bool).view(Liar)\n"},
        {"test_causal_mask": 2}),
    "delegates": (
        {"attention": "import attnlib.numpy as an\n\ndef attention(Q, K, V, mask=None):\n"
                      "    return an.attention(Q, K, V, mask)\n",
         "causal_mask": "import importlib\n\ncausal_mask = getattr(importlib.import_module("
                        "'attn' + 'lib.numpy'), 'causal' + '_mask')\n"},
        {"test_attention": 3, "test_causal_mask": 2}),
    "warns-on-stderr": (
        {"softmax": "import sys, warnings\n\n" + SOFTMAX.replace(
            "    x = np.asarray", "    print('softmax: here', file=sys.stderr)\n"
            "    warnings.warn('softmax warns', RuntimeWarning)\n    x = np.asarray")}, {}),
}  # fmt: skip

VANDAL = """
import glob, os, shutil, sqlite3
COURSE = {course!r}
tried = []
for path in glob.glob(COURSE + "/**", recursive=True):
    if os.path.isfile(path) and "vandal" not in path:
        for attack in (lambda p: open(p, "r+b").truncate(0), os.remove,
                       lambda p: open(p, "a").write("owned")):
            try:
                attack(path)
                tried.append("DONE " + path)
            except OSError:
                tried.append("refused")
try:
    db = sqlite3.connect(COURSE + "/gradebook.db")
    db.execute("DELETE FROM grade")
    db.commit()
except Exception as error:
    print("gradebook:", error)
shutil.rmtree(COURSE + "/autograded", ignore_errors=True)
shutil.rmtree(COURSE + "/submitted", ignore_errors=True)
print(sorted(set(tried)))
"""


def _open_up(path: Path) -> None:
    """Let other users traverse to the course, as on a real server: only file modes protect it."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        os.chmod(parent, mode | stat.S_IXOTH | stat.S_IROTH)
        if parent == Path(parent.anchor) or str(parent) in ("/tmp", "/"):
            break


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("isolation-course"), [LESSON])
    _open_up(course)
    honest = student_notebook(LESSON, {})
    for name in ("honest-a", "honest-b"):
        submit(course, LESSON, name, honest)
    for name, (cells, _) in HOSTILE.items():
        nb = student_notebook(LESSON, {})
        for grade_id, source in cells.items():
            edit_cell(nb, grade_id, source)
        submit(course, LESSON, name, nb)
    # A wrong padding_mask whose test cell is edited to pass, and a deleted test cell.
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "padding_mask", "def padding_mask(lengths, max_len):\n"
              "    return np.ones((len(lengths), 1, max_len), bool)\n")  # fmt: skip
    edit_cell(nb, "test_padding_mask", "print('all good')")
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_q1"]
    submit(course, LESSON, "edits-tests", nb)
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "softmax", SOFTMAX + VANDAL.format(course=str(course)))
    submit(course, LESSON, "vandal", nb)
    submit(course, LESSON, "corrupted", '{"cells": [ this is not a notebook')

    done = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
         "--workers", "3", "--timeout", "2", "--memory", "1024"],
        cwd=course, env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    results = {r["student"]: r for r in json.loads(done.stdout)}
    return course, done, results


def points(course: Path, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(LESSON, LESSON, student)
        return {g.name: g.score for g in nb.grades}


def test_the_batch_finishes_and_reports_the_corrupted_notebook(graded):
    course, done, results = graded
    assert done.returncode == 1, "a student with an error makes the exit status 1"
    assert results["corrupted"]["status"] == "error"
    assert (
        "NotJSONError" in results["corrupted"]["error"] or "JSON" in results["corrupted"]["error"]
    )
    others = {k: v for k, v in results.items() if k != "corrupted"}
    assert all(r["status"] == "graded" for r in others.values()), others


def test_honest_students_keep_every_point(graded):
    course, _, results = graded
    for name in ("honest-a", "honest-b"):
        assert results[name]["score"] == results[name]["max_score"] == 17, results[name]
        assert all(v == max(v, 0) for v in points(course, name).values())


@pytest.mark.parametrize("student", sorted(HOSTILE))
def test_hostile_code_loses_only_the_affected_points(graded, student):
    course, _, results = graded
    lost = HOSTILE[student][1]
    got = points(course, student)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        full = {c.name: c.max_score for c in gb.find_notebook(LESSON, LESSON).grade_cells}
    expected = {name: full[name] - lost.get(name, 0) for name in full}
    assert got == expected, (results[student], _failures(course, student))


def test_stderr_from_a_correct_answer_costs_nothing(graded):
    course, _, _ = graded
    nb = _autograded(course, "warns-on-stderr")
    tests = [
        c for c in nb["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
        and not c["metadata"]["nbgrader"].get("solution")
    ]  # fmt: skip
    assert tests
    for cell in tests:  # nbgrader gives 0 to a test cell with an error or a stderr stream
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", out
            assert not (out["output_type"] == "stream" and out["name"] == "stderr"), out
    outputs = json.dumps([c.get("outputs", []) for c in nb["cells"]])
    assert "softmax warns" in outputs  # this student's warning softmax really ran, and warned


def test_timeouts_and_crashes_are_explained(graded):
    course, _, _ = graded
    assert "CellTimeoutError" in json.dumps(_autograded(course, "loop"))
    assert "ProcessDied" in json.dumps(_autograded(course, "os-exit"))
    assert "MemoryError" in json.dumps(_autograded(course, "memory-bomb"))
    delegated = json.dumps(_autograded(course, "delegates"))
    assert "course's own implementation" in delegated


def test_a_50mb_print_leaves_a_small_notebook(graded):
    course, _, _ = graded
    path = course / "autograded" / "print-50mb" / LESSON / f"{LESSON}.ipynb"
    assert path.stat().st_size < 5 * 2**20
    assert "output truncated" in path.read_text()


def test_monkeypatching_numpy_gains_nothing(graded):
    course, _, _ = graded
    text = json.dumps(_outputs(course, "patches-numpy", "test_softmax"))
    # autograder.hidden.check was replaced by a no-op: the verdict from outside still stands
    assert "found by attn-grade's checks outside the notebook" in text
    assert "expected" in text  # the diagnosis names the wrong value


def test_edited_and_deleted_test_cells_are_graded_as_written(graded):
    course, _, _ = graded
    got = points(course, "edits-tests")
    assert got["test_padding_mask"] == 0  # the edit was undone: the real test failed
    assert got["test_q1"] == 1  # the deleted cell was put back and passed
    assert got["test_softmax"] == 2


def test_nothing_of_the_course_was_damaged(graded):
    course, _, results = graded
    assert results["vandal"]["score"] == 17
    for student in results:
        if student != "corrupted":
            assert (course / "submitted" / student / LESSON / f"{LESSON}.ipynb").exists()
            assert (course / "autograded" / student / LESSON / f"{LESSON}.ipynb").exists()
    with sqlite3.connect(course / "gradebook.db") as db:
        assert db.execute("select count(*) from grade").fetchone()[0] > 0
    text = json.dumps(_outputs(course, "vandal", "softmax"))
    assert "DONE" not in text, "the sandbox changed a course file"
    assert "refused" in text and "readonly database" in text


def test_killing_the_parent_only_kills_a_disposable_process(tmp_path):
    """Without a separate user (as when not root) the parent can be killed: it is a stand-in."""
    from autograder import executor, grading, isolation

    executor.warm_up()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
        nbformat.v4.new_code_cell("print('still here')"),
    ])  # fmt: skip
    result = grading.grade_notebook(nb, grading.Options(isolation.Limits(timeout=5)))
    assert "still here" in json.dumps(result["cells"])
    assert os.getpid() == result["pid"]  # and this process, the worker, is alive


def _autograded(course: Path, student: str) -> dict:
    path = course / "autograded" / student / LESSON / f"{LESSON}.ipynb"
    return json.loads(path.read_text())


def _outputs(course: Path, student: str, grade_id: str) -> list[dict]:
    for cell in _autograded(course, student)["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return cell.get("outputs", [])
    raise KeyError(grade_id)


def _failures(course: Path, student: str) -> list[str]:
    nb = _autograded(course, student)
    out = []
    for cell in nb["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        for o in cell.get("outputs", []):
            if o["output_type"] == "error":
                out.append(f"{grade_id}: {o['ename']}: {o['evalue'][:200]}")
    return out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
