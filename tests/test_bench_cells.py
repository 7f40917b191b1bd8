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
    # the executor's whole life, read from the same file as the rows: its CPU is theirs (a tick
    # or two apart: the two are read one after the other), split between user space and kernel
    life = found["executor"]
    assert life["user_s"] + life["system_s"] == pytest.approx(found["sandbox_total_s"], abs=0.05)
    assert life["user_s"] > life["system_s"] >= 0, life
    assert life["minor_faults"] > 1000 and life["major_faults"] >= 0, life  # ~20 000 for lesson 01


# Run from the repository's root, as the benchmarks are (``benchmarks`` is not installed).
USAGE_CHECK = """
import os, resource
from benchmarks.machine import process_ticks, process_usage

before = resource.getrusage(resource.RUSAGE_SELF)
usage = process_usage()
bytearray(64 << 20)  # 64 MiB of fresh pages: thousands of minor faults
sum(range(10_000_000))  # and user time
after = resource.getrusage(resource.RUSAGE_SELF)
again = process_usage()
assert before.ru_minflt <= usage.minor_faults <= after.ru_minflt <= again.minor_faults
assert before.ru_majflt <= usage.major_faults <= after.ru_majflt <= again.major_faults
assert again.minor_faults - usage.minor_faults >= 1000, (usage, again)
ticks = os.sysconf("SC_CLK_TCK")
for field, ours, theirs in (("user", again.user_ticks, after.ru_utime),
                            ("system", again.system_ticks, after.ru_stime)):
    assert abs(ours / ticks - theirs) <= 0.05, (field, ours / ticks, theirs)
assert again.user_ticks > usage.user_ticks
assert process_ticks() >= again.user_ticks + again.system_ticks
assert process_usage(2**22 + 1) is None  # beyond any pid_max: no such process
print("ok")
"""


def test_process_usage_is_what_the_kernel_reports_to_the_process_itself():
    done = subprocess.run(
        [sys.executable, "-c", USAGE_CHECK], cwd=REPO, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_an_unknown_lesson_is_one_clear_error():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cells", "--lesson", "99-nothing", "--runs", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no source notebook" in done.stderr and "99-nothing" in done.stderr
