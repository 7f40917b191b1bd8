"""``kill -9`` of ``attn-grade batch`` half-way, then a rerun: all graded once, none lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from course import BIN, env, make_course
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


def test_a_killed_batch_resumes_without_regrading_or_losing_anyone(tmp_path):
    course = make_course(tmp_path, [LESSON])
    kinds = list(STUDENTS[LESSON].items())
    students = []
    for n in range(12):
        kind, edits = kinds[n % len(kinds)]
        students.append(f"s{n:02d}-{kind}")
        submit(course, LESSON, students[-1], student_notebook(LESSON, edits))
    command = [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
               "--workers", "2"]  # fmt: skip

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
