"""A pool lost mid-batch is told from a submission's own error (``autograder.pool.Workers``).

A worker process killed from outside breaks a local pool: every result still to come, and every
later submission, fails for a reason no student gave. :class:`~autograder.pool.Workers` turns
that into ``None`` and a ``lost`` the batch stops on (``tests/test_grade_dask.py`` loses a Dask
scheduler mid-batch, end to end), while an error of the submission's own is raised as ever.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import time

import pytest

from autograder.limits import Limits
from autograder.pool import Pool, Workers


def _work(seconds: float, fail: bool = False) -> dict:
    time.sleep(seconds)
    if fail:
        raise ValueError("the submission's own error")
    return {"pid": os.getpid()}


class Processes(Workers):
    """A local pool of one process that runs :func:`_work`, told apart as :class:`Pool` is."""

    LOST = Pool.LOST

    def __init__(self):
        self.executor = cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))

    def gone(self) -> str:
        return "its process died"

    def submit(self, limits: Limits, nb_json: str, files: dict, student: str = ""):
        return self.executor.submit(_work, float(nb_json), student == "fails")


def test_a_killed_worker_is_the_pool_lost_and_a_submissions_error_is_its_own():
    pool = Processes()
    try:
        pid = pool.outcome(pool.send(Limits(), "0", {}))["pid"]
        with pytest.raises(ValueError, match="own error"):  # the submission's: raised as ever
            pool.outcome(pool.send(Limits(), "0", {}, "fails"))
        assert pool.lost == ""
        pending = pool.send(Limits(), "30", {})
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)  # killed from outside, mid-submission
        assert pool.outcome(pending) is None and pool.lost == "its process died"
        assert pool.send(Limits(), "0", {}) is None  # nothing more is sent
        assert pool.outcome(pending) is None
    finally:
        pool.executor.shutdown(wait=True, cancel_futures=True)
