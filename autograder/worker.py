"""The pool of warm workers behind ``attn-grade batch``.

Each worker is a fresh (spawned) process that imports NumPy, PyTorch, matplotlib, IPython and
attnlib once (:func:`autograder.executor.warm_up`), then grades submission after submission,
forking a sandbox for each (:mod:`autograder.grading`). This module imports nothing of nbgrader,
so a worker starts quickly. Workers die with the batch (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os

from . import executor, grading, isolation

_WORKER: dict = {}


def _init(slots, options: grading.Options) -> None:
    isolation.die_with_parent()
    executor.warm_up(options.picture_cells)
    slot = slots.get()
    uid = None if options.uid is None else options.uid + slot
    _WORKER.update(options=grading.Options(options.limits, uid, options.env), slot=slot)


def _ping() -> int:
    return _WORKER.get("slot", -1)


def _grade(nb_json: str, files: dict) -> dict:
    return grading.grade_notebook(json.loads(nb_json), _WORKER["options"], files)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def sandbox_options(
    limits: isolation.Limits, sandbox_user: bool = True, picture_cells: tuple[str, ...] = ()
) -> grading.Options:
    """Limits, the sandbox user ids (when we are root) and the environment nbgrader sets."""
    drop = sandbox_user and isolation.can_drop_privileges()
    uid = isolation.SANDBOX_UID_BASE if drop else None
    return grading.Options(limits, uid, {"NBGRADER_EXECUTION": "autograde"}, picture_cells)


class Pool:
    """``workers`` warm processes; sandbox user ids ``options.uid + slot`` when root.

    Each worker grades one submission at a time, so its BLAS and OpenMP libraries get one
    thread each (unless the environment already says otherwise): ``workers`` processes share
    the cores without oversubscribing them.
    """

    def __init__(self, workers: int, options: grading.Options):
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, "1")
        ctx = mp.get_context("spawn")
        slots = ctx.Queue()
        for slot in range(workers):
            slots.put(slot)
        self.executor = cf.ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init, initargs=(slots, options)
        )
        # Start (and warm) every worker now, while the caller reads the course.
        for _ in range(workers):
            self.executor.submit(_ping)

    def submit(self, nb_json: str, files: dict) -> cf.Future:
        return self.executor.submit(_grade, nb_json, files)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
