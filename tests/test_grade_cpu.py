"""A notebook that keeps every core busy costs the students graded beside it nothing.

Budgets and timeouts are wall clock, so a sandbox that takes the CPU from the others could make
an honest student graded at the same time run out of time. The attacker forks as many spinning
processes as its process limit allows, each in a session of its own (so that the kernel's
per-session scheduling groups give each a share as large as a whole sandbox's), and holds its
sandbox open until its budget ends with cells that need no CPU. Three honest students are graded
on the other worker in the meantime; each must keep every point: under a CPU quota because none
runs out of time, without one because each who did is graded again, alone.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from course import BIN, env, make_course
from hostile import LESSON
from nbformat.v4 import new_code_cell
from test_autograde import failing_cells
from test_grade_hostile import full, honest_notebook, scores
from test_grade_students import submit

from attnlib import checks
from autograder import limits, view

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]
TIMEOUT, BUDGET = 10, 20
# Capped, the spinners leave an honest notebook its own core, but the rest of a full run may
# take most of it (the hostile corpus's sandboxes, say): its budget is twice the other's, as no
# claim of this test is about how fast an honest notebook runs on a busy machine.
CAPPED_BUDGET = 2 * BUDGET
SPINNERS = 56  # under the sandbox's limit of 64 processes and threads
HONEST = ["b-honest", "c-honest", "d-honest"]
WORK = 0.5  # CPU-seconds of each of an honest student's own experiments
START = 4  # seconds from the spinning cell to the spinning
EXERCISES = {exercise.name for exercise in checks.LESSONS[LESSON]}

# The spinners start all at once (so that forking them is not slowed by the first), a few
# seconds after the cell: the other worker, whose templates warm while this one's do, is then
# grading beside them, not still warming where they would starve it past the spinner's budget.
SPIN = f"""
import os, time
start = time.monotonic() + {START}
for _ in range({SPINNERS}):
    if os.fork() == 0:
        os.setsid()  # a scheduling group of its own
        time.sleep(max(start - time.monotonic(), 0))
        while True:
            pass
"""

EXPERIMENT = f"""
import time
start = time.process_time()
while time.process_time() - start < {WORK}:
    pass
"""


def spinning_notebook(timeout: int, budget: int):
    """The lesson's notebook with the spinners started right after its first code cell and its
    sandbox then held until its budget ends, with cells of a sleep well under the timeout: a cell
    that needs no CPU finishes in time however starved its kernel is, so the sandbox, and every
    spinner in it, lives until the budget ends instead of being stopped (and started again) by a
    cell out of time. Its answers are never reached: an attacker needs none."""
    nb = honest_notebook()
    hold = f"import time\ntime.sleep({timeout / 5:g})\n"
    holds = [new_code_cell(hold) for _ in range(5 * budget // timeout + 1)]
    first = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    nb.cells[first + 1 : first + 1] = [new_code_cell(SPIN), *holds]
    return nb


def busy_notebook():
    """An honest notebook with the learner's own experiment of ``WORK`` CPU-seconds after each
    exercise's test cell and at the end: well inside the shorter timeout with a processor to
    itself, outside it with less than ``WORK / timeout`` of one, as beside a sandbox of spinners.
    Spread over the notebook, one of them runs while the spinners spin however long the grader's
    own checks (starved too) take between them: a single one at the end ran after the spinner's
    budget had ended when the machine was busy with the rest of the suite."""
    nb = honest_notebook()
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.startswith("test_") and grade_id.removeprefix("test_") in EXERCISES:
            cells.append(new_code_cell(EXPERIMENT))
    nb.cells = [*cells, new_code_cell(EXPERIMENT)]
    return nb


def test_a_sandbox_that_spins_every_core_costs_its_neighbours_nothing(tmp_path):
    if not limits.can_cap_cpu():
        pytest.skip("no cgroup with a CPU controller to cap a sandbox's share of the machine")
    course, results = _grade_beside_a_spinner(tmp_path, TIMEOUT, CAPPED_BUDGET)
    for name in HONEST:
        why = failing_cells(course, LESSON, name)  # the errors its graded notebook shows
        assert scores(course, name) == full(course), (name, results[name], why)
        assert not results[name]["regraded"], "under a CPU quota no neighbour runs out of time"


def test_without_a_cpu_quota_a_student_starved_beside_others_is_graded_again_alone(tmp_path):
    """Where no sandbox can be capped (a normal user, no CPU controller; here ``--cpus 0``), the
    spinner takes the processors from its neighbours until they run out of time. Every student
    who ran out of time waiting for a processor, and got less than three quarters of one (the
    CPU its sandbox's processes used, counted by a cgroup or from /proc), is graded again once
    the class is done, alone, with no other sandbox running: the honest ones then keep every
    point. The spinner, whose own cell slept when its budget ended, is not."""
    # A short timeout, so that a neighbour's starved experiment runs out of it for sure; the whole
    # budget, so that the spinners are still spinning when it runs.
    course, results = _grade_beside_a_spinner(tmp_path, TIMEOUT // 2, BUDGET, "--cpus", "0")
    for name in HONEST:
        why = failing_cells(course, LESSON, name)  # the errors its graded notebook shows
        assert scores(course, name) == full(course), (name, results[name], why)
    journal = (course / ".attn-grade" / f"{LESSON}.jsonl").read_text().splitlines()
    finished = [json.loads(line)["student"] for line in journal]
    assert sorted(finished) == sorted(results), "a first grade to be redone was journaled as done"
    assert not results["a-spins"]["regraded"], "it slept through its own spinning: not starved"
    hurt = any(results[name]["regraded"] for name in HONEST)
    assert hurt, f"the spinner made no honest student run out of time: this shows nothing {results}"


def _grade_beside_a_spinner(tmp_path, timeout: int, budget: int, *extra: str):
    course = make_course(tmp_path, [LESSON])
    submit(course, LESSON, "a-spins", spinning_notebook(timeout, budget))  # beside the others
    for name in HONEST:
        submit(course, LESSON, name, busy_notebook())
    batch = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
         "--workers", "2", "--timeout", str(timeout), "--budget", str(budget), *extra],
        cwd=course, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=600,
    )  # fmt: skip
    assert batch.stdout.strip(), batch.stderr[-3000:]
    results = {r["student"]: r for r in json.loads(batch.stdout)}
    assert set(results) == {"a-spins", *HONEST}
    return course, results


def test_as_root_a_mounted_cpu_controller_caps_every_sandbox():
    """The test above is skipped only where there is no CPU controller to use, never because
    capping broke: as root with cgroup v1's ``cpu`` hierarchy mounted, capping must work."""
    if os.geteuid() != 0 or "cpu" not in limits._own_cgroups():
        pytest.skip("not root, or no cgroup v1 CPU controller")
    assert limits.can_cap_cpu()
