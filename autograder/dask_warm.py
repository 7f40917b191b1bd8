"""A Dask worker's start for a batch: its templates warm while the batch starts.

``attn-grade batch --dask`` registers :class:`Warm` with the cluster for the batch's lesson. Each
worker it reaches runs :meth:`Warm.setup` at once, and a worker that joins later (one started to
replace a worker that died, or by a cluster that scales up) runs it as it joins: it starts a
template pair per thread (:func:`autograder.template.warm`) and draws the checks' problems in a
thread of its own (:func:`autograder.pool.warm`). Without it a worker would start them only when
its first submission arrived, seconds after the batch had started. When the batch ends it
unregisters the plugin, and each worker closes the spares no thread took.

Nothing here reaches a sandbox: the templates are the same programs every grading starts.
"""

from __future__ import annotations

import contextlib
import logging

from distributed import WorkerPlugin

log = logging.getLogger(__name__)


class Warm(WorkerPlugin):
    """Warm a worker's templates for ``lesson`` (see the module doc)."""

    def __init__(self, lesson: str, isolation: str):
        self.lesson, self.isolation = lesson, isolation
        self.name = f"attn-grade-warm-{lesson}-{isolation}"

    def setup(self, worker) -> None:
        from . import pool

        # A template that cannot start here (no bubblewrap on this worker, say): the first
        # submission tries again and says why in its verdict, as without the plugin.
        with contextlib.suppress(Exception):
            started = pool.warm(self.lesson, self.isolation, worker.state.nthreads)
            log.info("attn-grade: %d template pair(s) warming for %s", started, self.lesson)

    def teardown(self, worker) -> None:
        from .template import drop_spares

        drop_spares(self.lesson, self.isolation)
