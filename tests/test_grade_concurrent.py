"""Graders running at the same time never share an identity, so no student can hurt another's.

Two batches graded at once, each with a student who signals every process it can name, and a
plain ``nbgrader autograde`` beside them: every honest student keeps full marks. And the claim
on a sandbox user id is exclusive across processes and released when its holder dies.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from course import BIN, env, make_course, nbgrader
from hostile import LESSON, corpus
from nbgrader.api import Gradebook
from test_grade_students import edit_cell, student_notebook, submit

from autograder import identity, view

TIMEOUT, BUDGET = 5, 60
HONEST = ["honest-1", "honest-2"]


def _claim_in_child() -> subprocess.Popen:
    """A process that claims a sandbox user id, prints it, and waits to be killed."""
    code = (
        "from autograder import identity; import sys, time\n"
        "c = identity.claim(); print(c.uid, flush=True); time.sleep(600)"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_sandbox_user_id_is_held_by_one_grader_at_a_time():
    child = _claim_in_child()
    try:
        theirs = int(child.stdout.readline())
        ours = [identity.claim(), identity.claim()]
        uids = {c.uid for c in ours}
        assert len(uids) == 2 and theirs not in uids
        assert all(identity.FIRST_UID <= uid < identity.FIRST_UID + identity.COUNT for uid in uids)
    finally:
        child.kill()
        child.wait()
    again = identity.claim()  # the kernel released the dead grader's claim
    try:
        assert again.uid == theirs or again.uid < min(uids)
    finally:
        again.release()
        for c in ours:
            c.release()


def test_claims_run_out_loudly():
    held = [identity.claim(first=identity.FIRST_UID + 900, count=2) for _ in range(2)]
    try:
        with pytest.raises(identity.NoFreeIdentity, match="in use by other graders"):
            identity.claim(first=identity.FIRST_UID + 900, count=2)
    finally:
        for c in held:
            c.release()


def _course(root, attacker_source: str):
    root.mkdir()
    course = make_course(root, [LESSON])
    for name in HONEST:
        submit(course, LESSON, name, student_notebook(LESSON, {}))
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "softmax", nb_source(nb, "softmax") + attacker_source)
    submit(course, LESSON, "kills-everyone", nb)
    return course


def nb_source(nb, grade_id: str) -> str:
    return next(
        c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


def _scores(course) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.find_assignment(LESSON).submissions}


@pytest.mark.slow
@pytest.mark.lesson02
@pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}")
def test_batches_graded_at_once_leave_each_others_students_alone(tmp_path):
    killer = "\n" + corpus(tmp_path, tmp_path)["kills-everyone"].extra[0]
    courses = [_course(tmp_path / name, killer) for name in ("one", "two", "three")]
    (tmp_path / "three" / "nbgrader_config.py").open("a").write(
        f"\nc.ExecutePreprocessor.timeout = {TIMEOUT}\nc.TrustedExecute.budget = {BUDGET}\n"
    )
    batches = [
        subprocess.Popen(
            [
                str(BIN / "attn-grade"),
                "batch",
                LESSON,
                "--course",
                str(course),
                "--json",
                "--workers",
                "1",
                "--timeout",
                str(TIMEOUT),
                "--budget",
                str(BUDGET),
            ],
            cwd=course,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        for course in courses[:2]
    ]
    plain = nbgrader(courses[2], "autograde", LESSON)
    outs = [batch.communicate(timeout=600) for batch in batches]
    for (out, err), batch in zip(outs, batches, strict=True):
        assert batch.returncode == 0, err[-3000:]
        results = {r["student"]: r for r in json.loads(out)}
        assert {r["status"] for r in results.values()} == {"graded"}, results
    assert plain.returncode == 0, plain.stderr[-3000:]
    for course in courses:
        scores = _scores(course)
        assert [scores[name] for name in HONEST] == [17.0, 17.0], (course, scores)
        assert scores["kills-everyone"] == 17.0  # its softmax is right; it hurt only itself
