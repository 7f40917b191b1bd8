"""A local pool's worker process killed from outside (``autograder.respawn``, ``autograder.pool``).

A killed worker process breaks a process pool: every result still to come fails with it.
:class:`~autograder.respawn.Processes` starts its processes again and sends again what they held,
:attr:`~autograder.respawn.Processes.RESTARTS` times; past that the batch's pool is lost:
:class:`~autograder.pool.Workers` turns that into ``None`` and a ``lost`` the batch stops on
(``tests/test_grade_dask.py`` loses a Dask scheduler mid-batch, ``tests/test_grade_resume.py``
kills a worker of a batch, end to end). An error of the work's own is raised as ever.

The work here stands in for a notebook's grading: it kills its own process, as the system's
out-of-memory killer would, so that the break comes exactly where the test puts it.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from autograder.limits import Limits
from autograder.pool import RESTARTED, Pool
from autograder.respawn import Processes


def _work(limits: Limits, spec: str, files: dict, student: str) -> dict:
    spec = json.loads(spec)
    if spec.get("dies") or (spec.get("dies_once") and not Path(spec["dies_once"]).exists()):
        if spec.get("dies_once"):
            Path(spec["dies_once"]).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if student == "fails":
        raise ValueError("the submission's own error")
    return {"pid": os.getpid()}


def one_process(again: bool = False) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))


class Tiny(Pool):
    """The batch's local pool, on one process that runs :func:`_work` (no templates, no
    lesson)."""

    def __init__(self):
        self.templates, self.sending = (), Processes(one_process, _work, RESTARTED)


def send(pool: Pool, student: str = "", **spec):
    return pool.send(Limits(), json.dumps(spec), {}, student)


def test_a_killed_worker_is_started_again_and_what_it_held_is_sent_again(tmp_path, capsys):
    pool = Tiny()
    try:
        first = pool.outcome(send(pool))["pid"]
        with pytest.raises(ValueError, match="own error"):  # the submission's: raised as ever
            pool.outcome(send(pool, "fails"))
        came = send(pool)  # its result comes before the break, and is kept
        while not came.future.done():
            time.sleep(0.01)
        dies = send(pool, dies_once=str(tmp_path / "died"))
        send(pool)  # queued behind it, and dropped by its sender: not sent again, nor kept
        behind = send(pool)  # queued behind it: broken with it, sent again
        again = pool.outcome(dies)["pid"]
        assert again != first and pool.lost == "" and pool.sending.restarts == 1
        assert pool.outcome(behind)["pid"] == again
        assert pool.outcome(came)["pid"] == first  # not sent again
        assert pool.outcome(send(pool))["pid"] == again and not pool.sending.sent
        said = capsys.readouterr().err
        assert said == RESTARTED.format(n=2, restart=1, of=Processes.RESTARTS) + "\n", said
    finally:
        pool.close()


def test_a_pool_that_breaks_more_often_than_a_batch_gets_over_is_lost(capsys):
    pool = Tiny()
    try:
        assert pool.outcome(send(pool, dies=True)) is None
        assert pool.sending.restarts == Processes.RESTARTS
        assert pool.lost == (
            f"a worker process of the batch died {Processes.RESTARTS + 1} times (killed from "
            "outside: out of memory?)"
        )
        assert send(pool) is None  # nothing more is sent
        said = capsys.readouterr().err.splitlines()
        assert said == [RESTARTED.format(n=1, restart=n, of=Processes.RESTARTS)
                        for n in range(1, Processes.RESTARTS + 1)]  # fmt: skip
    finally:
        pool.close()
