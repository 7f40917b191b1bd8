"""``kill -9`` of ``attn-grade batch`` half-way, then a rerun: all graded once, none lost. And
``kill -9`` of one of its worker processes: the batch goes on, all graded once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from course import BIN, children, env, make_course
from nbgrader.api import Gradebook
from test_grade_students import STUDENTS, student_notebook, submit

LESSON = "02-softmax-masking"
pytestmark = [pytest.mark.slow, pytest.mark.lesson02]


def journal(course) -> list[dict]:
    path = course / ".attn-grade" / f"{LESSON}.jsonl"
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return lines


def a_class(course, size: int = 12) -> list[str]:
    """``size`` students submit, each of a kind of :data:`STUDENTS` in turn (``s03-<kind>``)."""
    kinds = list(STUDENTS[LESSON].items())
    students = []
    for n in range(size):
        kind, edits = kinds[n % len(kinds)]
        students.append(f"s{n:02d}-{kind}")
        submit(course, LESSON, students[-1], student_notebook(LESSON, edits))
    return students


def batch_command(course) -> list[str]:
    return [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
            "--workers", "2"]  # fmt: skip


def test_a_killed_batch_resumes_without_regrading_or_losing_anyone(tmp_path):
    course = make_course(tmp_path, [LESSON])
    students = a_class(course)
    command = batch_command(course)

    batch = subprocess.Popen(command, cwd=course, env=env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 180
    while len(journal(course)) < 4 and time.monotonic() < deadline and batch.poll() is None:
        time.sleep(0.05)
    os.kill(batch.pid, signal.SIGKILL)  # the batch process only: its workers die with it
    batch.wait()
    first = {e["student"] for e in journal(course)}
    assert 4 <= len(first) < len(students), "the kill should come half-way"

    done = subprocess.run(command, cwd=course, env=env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    second = {r["student"]: r for r in json.loads(done.stdout)}
    assert set(second) == set(students)
    assert {s for s, r in second.items() if r["status"] == "skipped"} == first
    assert {s for s, r in second.items() if r["status"] == "graded"} == set(students) - first

    graded = [e["student"] for e in journal(course) if e["status"] == "graded"]
    assert sorted(graded) == sorted(students), "each student graded exactly once"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for entry in journal(course):
            submission = gb.find_submission(LESSON, entry["student"])
            assert submission.score == entry["score"]
            assert (course / "autograded" / entry["student"] / LESSON / f"{LESSON}.ipynb").exists()
        assert gb.find_submission(LESSON, "s00-honest").score == 17
        assert gb.find_submission(LESSON, "s01-blank").score == 0


def workers_of(batch: int) -> list[int]:
    """The batch's worker processes: its children forked from it (its templates are not)."""
    own = Path(f"/proc/{batch}/cmdline").read_bytes()
    return [pid for pid, cmdline in children(batch).items() if cmdline == own]


def test_a_worker_process_killed_mid_batch_costs_nobody_anything(tmp_path):
    """As the system's out-of-memory killer would: ``kill -9`` of one of the batch's worker
    processes, a few students in. The batch starts its workers again, sends again what they
    held, says so in one line, and grades everyone once, each kind of student with its score."""
    course = make_course(tmp_path, [LESSON])
    students = a_class(course)
    batch = subprocess.Popen(batch_command(course), cwd=course, env=env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while len(journal(course)) < 3 and time.monotonic() < deadline and batch.poll() is None:
            time.sleep(0.05)
        workers = workers_of(batch.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        before = len(journal(course))
        out, err = batch.communicate(timeout=300)
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
    assert batch.returncode == 0, err[-3000:]
    assert before < len(students), "the kill should come before the end"
    said = [line for line in err.splitlines() if "died" in line]
    assert len(said) == 1 and "the workers were started again" in said[0], err[-3000:]
    assert "restart 1 of the 3 a batch gets" in said[0]
    results = {r["student"]: r for r in json.loads(out)}
    assert set(results) == set(students)
    assert {r["status"] for r in results.values()} == {"graded"}, results
    graded = [e["student"] for e in journal(course) if e["status"] == "graded"]
    assert sorted(graded) == sorted(students), "each student graded exactly once"
    by_kind: dict[str, set[float]] = {}
    for student, result in results.items():
        by_kind.setdefault(student[4:], set()).add(result["score"])
    assert all(len(scores) == 1 for scores in by_kind.values()), by_kind
    assert by_kind["honest"] == {17} and by_kind["blank"] == {0}
