"""The grading workers behind ``attn-grade batch``: trusted processes, one template each.

Each worker is a fresh (spawned) process of the trusted side. It starts one template for the
lesson (:mod:`autograder.template`) and then grades submission after submission with
:func:`autograder.engine.grade`: it runs the hidden checks itself, while every submission's code
runs in its own sandbox forked from the template. Workers die with the batch
(``PR_SET_PDEATHSIG``), and their templates and sandboxes die with them.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os

from .limits import Limits

_WORKER: dict = {}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _init(lesson: str, isolation: str, limits: Limits) -> None:
    from .sandbox.confine import PR_SET_PDEATHSIG, prctl
    from .template import shared

    prctl(PR_SET_PDEATHSIG, 9)
    _WORKER.update(lesson=lesson, isolation=isolation, limits=limits)
    try:
        shared(lesson, isolation)  # warm it now, while the batch reads the course
    except Exception as error:  # noqa: BLE001 — reported with the first submission instead
        _WORKER["error"] = str(error)


def _ping() -> int:
    return os.getpid()


def _grade(nb_json: str, files: dict[str, bytes]) -> dict:
    from . import engine
    from .template import shared

    template = shared(_WORKER["lesson"], _WORKER["isolation"])
    return engine.grade(json.loads(nb_json), template, _WORKER["limits"], files).as_dict()


class Pool:
    """``workers`` trusted grading processes for one lesson (see the module doc).

    Each worker grades one submission at a time, so its BLAS and OpenMP libraries get one thread
    (unless the environment already says otherwise): the workers share the cores.
    """

    def __init__(self, workers: int, lesson: str, isolation: str, limits: Limits):
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, "1")
        ctx = mp.get_context("spawn")
        self.executor = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init,
            initargs=(lesson, isolation, limits),
        )
        for _ in range(workers):
            self.executor.submit(_ping)

    def submit(self, nb_json: str, files: dict[str, bytes]) -> cf.Future:
        return self.executor.submit(_grade, nb_json, files)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
