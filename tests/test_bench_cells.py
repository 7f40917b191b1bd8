"""``python -m benchmarks.cells``: a submission's sandbox CPU, cell by cell, from real sandboxes."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest
from course import REPO

from autograder import view

LESSON = "01-scoring"
pytestmark = [
    pytest.mark.lesson01,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def test_every_code_cell_gets_a_row_and_the_rows_add_up_to_the_notebook():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cells", "--lesson", LESSON, "--runs", "1", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    nb = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    code = {i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"}
    rows = found["cells"]
    assert {row["cell"] for row in rows} == code and len(rows) == len(code)
    sandbox = [row["sandbox_s"] for row in rows]
    assert sandbox == sorted(sandbox, reverse=True)  # the heaviest first
    assert min(sandbox) >= 0 and min(row["trusted_s"] for row in rows) >= 0
    # one run: the notebook's total is its rows' sum, and the executor did measurable work
    assert found["sandbox_total_s"] == pytest.approx(sum(sandbox), abs=0.01)
    assert found["sandbox_total_s"] >= 0.05, found
    test_cells = {row["what"] for row in rows if row["what"].startswith("test_")}
    assert {f"test_{e}" for e in ("dot_scores", "scaled_dot_scores")} <= test_cells
    assert found["machine"]["cores"] >= 1 and found["isolation"] == "namespaces"


def test_an_unknown_lesson_is_one_clear_error():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cells", "--lesson", "99-nothing", "--runs", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no source notebook" in done.stderr and "99-nothing" in done.stderr
