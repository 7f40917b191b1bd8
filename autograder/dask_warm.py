"""A Dask worker's start for a batch: its templates warm while the batch starts.

``attn-grade batch --dask`` registers :class:`Warm` with the cluster for the batch's lesson. Each
worker it reaches runs :meth:`Warm.setup` at once, and a worker that joins later (one started to
replace a worker that died, or by a cluster that scales up) runs it as it joins: it starts a
template pair per thread (:func:`autograder.template.warm`) and draws the checks' problems in a
thread of its own (:func:`autograder.pool.warm`). Without it a worker would start them only when
its first submission arrived, seconds after the batch had started. When the batch ends it
unregisters the plugin, and each worker closes the spares no thread took.

A batch that is killed (SIGKILL, a closed terminal, the out-of-memory killer) runs no code to
unregister it. :class:`Leash`, registered on the scheduler beside it, does that as the batch's
client leaves, however it leaves; without it, workers that joined later would go on warming
templates for a batch that is gone. A scheduler that cannot load this module (one without the
course installed) refuses the leash, and the batch grades as before, the plugin then replaced by
the next batch of the lesson.

Two batches of one lesson on one cluster at once (two sections of a class, say) share each
worker's templates. Held by a leash, each batch's plugin has a name of its own, so neither
replaces or unregisters the other's, and a worker closes the spares only when the last of them
is gone. Without a leash the plugin has the lesson's name, so that the next batch replaces it.

Nothing here reaches a sandbox: the templates are the same programs every grading starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from distributed import SchedulerPlugin, WorkerPlugin

log = logging.getLogger(__name__)
_PENDING: set[asyncio.Task] = set()  # the event loop holds its tasks weakly


class Warm(WorkerPlugin):
    """Warm a worker's templates for ``lesson`` (see the module doc)."""

    def __init__(self, lesson: str, isolation: str, owner: str = ""):
        """``owner``: the batch's client id, for a plugin of the batch's own (one a leash
        holds); none for the lesson's, which the next batch of the lesson replaces."""
        self.lesson, self.isolation = lesson, isolation
        self.name = "-".join(filter(None, ("attn-grade-warm", lesson, isolation, owner)))

    def setup(self, worker) -> None:
        from . import pool

        # A template that cannot start here (no bubblewrap on this worker, say): the first
        # submission tries again and says why in its verdict, as without the plugin.
        with contextlib.suppress(Exception):
            started = pool.warm(self.lesson, self.isolation, worker.state.nthreads)
            log.info("attn-grade: %d template pair(s) warming for %s", started, self.lesson)

    def teardown(self, worker) -> None:
        from .template import drop_spares

        # (the worker has taken this plugin off its list before calling this)
        if not any(self._same_lesson(plugin) for plugin in worker.plugins.values()):
            drop_spares(self.lesson, self.isolation)

    def _same_lesson(self, plugin) -> bool:
        """Is ``plugin`` another batch's warm-up, whose threads would take the same spares?"""
        return isinstance(plugin, Warm) and (plugin.lesson, plugin.isolation) == (
            self.lesson,
            self.isolation,
        )


class Leash(SchedulerPlugin):
    """On the scheduler: unregister the worker plugin ``warming`` when the client ``owner`` (the
    batch that registered it) leaves. Named after the plugin, so a later batch of the lesson,
    which replaces the plugin, replaces its leash too."""

    def __init__(self, warming: str, owner: str):
        self.warming, self.owner = warming, owner
        self.name = f"{warming}-leash"

    def remove_client(self, scheduler, client: str) -> None:
        if client != self.owner:
            return
        scheduler.remove_plugin(name=self.name)
        if self.warming in scheduler.worker_plugins:  # not unregistered by the batch itself
            task = asyncio.get_running_loop().create_task(
                scheduler.unregister_worker_plugin(None, self.warming)
            )
            _PENDING.add(task)
            task.add_done_callback(_PENDING.discard)
