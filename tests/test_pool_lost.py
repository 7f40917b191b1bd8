"""A local pool's worker process killed from outside (``autograder.pool.Pool``).

A killed worker process breaks a local pool: every result still to come fails with it. The pool
starts its processes again and sends again what they held, :attr:`~autograder.pool.Pool.RESTARTS`
times a batch; past that it is lost: :class:`~autograder.pool.Workers` turns that into ``None``
and a ``lost`` the batch stops on (``tests/test_grade_dask.py`` loses a Dask scheduler mid-batch,
``tests/test_grade_resume.py`` kills a worker of a batch, end to end). An error of the
submission's own is raised as ever.

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


def _work(limits: Limits, spec: str, files: dict, student: str) -> dict:
    spec = json.loads(spec)
    if spec.get("dies") or (spec.get("dies_once") and not Path(spec["dies_once"]).exists()):
        if spec.get("dies_once"):
            Path(spec["dies_once"]).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if student == "fails":
        raise ValueError("the submission's own error")
    return {"pid": os.getpid()}


class Processes(Pool):
    """:class:`Pool`'s sending, restarting and losing, on one spawned process that runs
    :func:`_work` (no templates, no lesson)."""

    TASK = staticmethod(_work)

    def __init__(self):
        self.size, self.task, self.restarts, self.sent, self.templates = 1, (), 0, {}, ()
        self.executor = self._executor(mp.get_context("spawn"), ())

    def _executor(self, ctx, templates: tuple) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(self.size, mp_context=ctx)


def send(pool: Pool, student: str = "", **spec):
    return pool.send(Limits(), json.dumps(spec), {}, student)


def test_a_killed_worker_is_started_again_and_what_it_held_is_sent_again(tmp_path, capsys):
    pool = Processes()
    try:
        first = pool.outcome(send(pool))["pid"]
        with pytest.raises(ValueError, match="own error"):  # the submission's: raised as ever
            pool.outcome(send(pool, "fails"))
        came = send(pool)  # its result comes before the break, and is kept
        while not came.future.done():
            time.sleep(0.01)
        dies = send(pool, dies_once=str(tmp_path / "died"))
        behind = send(pool)  # queued behind it: broken with it, sent again
        again = pool.outcome(dies)["pid"]
        assert again != first and pool.lost == "" and pool.restarts == 1
        assert pool.outcome(behind)["pid"] == again
        assert pool.outcome(came)["pid"] == first  # not sent again
        assert pool.outcome(send(pool))["pid"] == again and not pool.sent
        said = capsys.readouterr().err
        assert said == RESTARTED.format(n=2, restart=1, of=Pool.RESTARTS) + "\n", said
    finally:
        pool.close()


def test_a_pool_that_breaks_more_often_than_a_batch_gets_over_is_lost(capsys):
    pool = Processes()
    try:
        assert pool.outcome(send(pool, dies=True)) is None
        assert pool.restarts == Pool.RESTARTS
        assert pool.lost == (
            f"a worker process of the batch died {Pool.RESTARTS + 1} times (killed from "
            "outside: out of memory?)"
        )
        assert send(pool) is None  # nothing more is sent
        said = capsys.readouterr().err.splitlines()
        assert said == [RESTARTED.format(n=1, restart=n, of=Pool.RESTARTS)
                        for n in range(1, Pool.RESTARTS + 1)]  # fmt: skip
    finally:
        pool.close()
