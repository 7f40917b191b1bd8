"""The grading workers behind ``attn-grade batch``: a local pool, or a Dask cluster.

Each worker is a trusted process. It keeps one warm template per lesson
(:mod:`autograder.template`) and grades submission after submission with
:func:`autograder.engine.grade`: it runs the hidden checks itself, while every submission's code
runs in its own sandbox forked from the template. The same isolation holds wherever a worker
runs; the worker only *computes* a result — nbgrader's gradebook is written by the batch alone,
once per submission, whatever happens to the workers.

* :class:`Pool` — local worker processes, which die with the batch (``PR_SET_PDEATHSIG``), their
  sandboxes with them. The batch starts one template per lesson for all of them
  (``Template(shared=True)``) and forks the workers from its own process, which has imported
  what they need; each worker spawns its sandboxes from that template as a user id of its own
  (:class:`autograder.template.Attached`). Where forking is not safe (this process already runs
  threads), the workers are spawned afresh and each starts a template of its own.
* :class:`DaskPool` — the workers of a Dask ``distributed`` cluster (a scheduler address,
  ``local:N`` for a ``LocalCluster`` of N single-threaded workers, or ``gateway:NAME`` for a
  Dask Gateway cluster). Each worker starts its templates as the batch reaches it, or as it
  joins the cluster during the batch (:mod:`autograder.dask_warm`). A worker that dies
  mid-batch costs nothing: Dask runs its submissions again elsewhere, and the batch applies
  each result once.

A local worker process killed from outside (the system's out-of-memory killer) breaks the local
pool: it starts its processes again and sends again the notebooks they held, as Dask does for a
worker it lost, up to three times a batch (:mod:`autograder.respawn`). A batch whose connection
to its Dask scheduler is lost, even for a moment, has every notebook it sent cancelled by Dask:
once the connection is back, it sends them again, up to three times a batch
(:class:`Reconnecting`). Past that, once a scheduler does not come back, or once a cluster has
had no worker for :func:`worker_wait` seconds (Dask would hold the work for ever), the pool is
lost: :class:`Workers` tells that from a submission's own error, and the batch grades the student
in hand itself, records nobody else, and stops with one line (a rerun grades the rest).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import logging
import multiprocessing as mp
import os
import tempfile
import threading
import time

from .limits import Limits
from .respawn import Processes, Resending

_WORKER: dict = {}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# No dashboard; the scheduler's own HTTP routes (health, metrics) on a free port of 127.0.0.1, not
# on 8787, which a second cluster on the machine (another instructor's batch) would find taken.
QUIET_SCHEDULER = {"dashboard_address": "127.0.0.1:0"}


class PoolError(Exception):
    """The batch's workers cannot be had (a Dask scheduler out of reach); ``status`` is the
    command's exit status."""

    status = 2


class Workers:
    """What both pools share: telling a pool lost mid-batch (its workers gone: the batch cannot
    go on, and no submission is to blame) from a submission's own error."""

    LOST: tuple[type[BaseException], ...] = ()  # errors that mean the pool is gone
    lost = ""  # once it is gone: what was lost, for the batch to say
    sending: Resending  # the work sent, sent again when the workers were lost and had again

    def gone(self, error: BaseException) -> str:
        """What was lost, in words (``error``: what told it)."""
        raise NotImplementedError

    def _lost(self, error: BaseException) -> bool:
        if isinstance(error, self.LOST):
            self.lost = self.lost or self.gone(error)
        return bool(self.lost)

    def _unless_lost(self, call):
        """``call()``; None once the pool is gone. Any other error is raised as it is."""
        if self.lost:
            return None
        try:
            return call()
        except Exception as error:
            if self._lost(error):
                return None
            raise

    def send(self, limits: Limits, nb_json: str, files: dict[str, bytes], student: str = ""):
        """Send a notebook to grade; what is returned is kept until its :meth:`outcome` is taken
        (None once the pool is gone)."""
        return self._unless_lost(lambda: self.sending.submit(limits, nb_json, files, student))

    def outcome(self, sent) -> dict | None:
        """The result of a :meth:`send`; None once the pool is gone (the batch then grades the
        notebook in hand itself, and stops). Any other error is the submission's."""
        return self._unless_lost(lambda: self.sending.result(sent))


def _init(lesson: str, isolation: str, shared: tuple = ()) -> None:
    """A worker's start: ``shared`` are the batch's templates (verdicts', demonstrations' or
    None) when the worker was forked from it, else () and the worker starts its own."""
    from attnlib import checks

    from .sandbox.confine import PR_SET_PDEATHSIG, prctl
    from .template import Attached, shared_pair

    prctl(PR_SET_PDEATHSIG, 9)
    _WORKER.update(lesson=lesson, isolation=isolation)
    try:
        if shared:
            pair = _WORKER["pair"] = tuple(t and Attached(t) for t in shared)
        else:
            pair = shared_pair(lesson, isolation, wait=False)  # warm while the batch starts
        checks.draw_ahead(lesson)  # the checks' searches, meanwhile (if not drawn before the fork)
        pair[0].ready()
    except Exception as error:  # noqa: BLE001 — reported with the first submission instead
        _WORKER["error"] = str(error)


def _preload(lesson: str) -> None:
    """What every worker imports and draws ahead (hypothesis among it), done once in the process
    they are forked from: each finds it done."""
    from attnlib import checks

    from . import engine  # noqa: F401

    checks.draw_ahead(lesson)


def warm(lesson: str, isolation: str, threads: int) -> int:
    """A cluster worker's start for a batch (:mod:`autograder.dask_warm`): the templates of its
    ``threads`` threads, started now, and the checks' problems drawn in a thread of its own,
    which the first submission waits for. Return how many template pairs were started."""
    from .template import warm as warm_templates

    started = warm_templates(lesson, isolation, threads)
    drawing = threading.Thread(target=_preload, args=(lesson,), daemon=True, name="attn-draws")
    drawing.start()
    _WORKER["drawing"] = drawing
    return started


def _ping() -> int:
    return os.getpid()


def grade(
    lesson: str,
    isolation: str,
    limits: Limits,
    nb_json: str,
    files: dict,
    student: str = "",
    pair: tuple | None = None,
) -> dict:
    """Grade one notebook in this worker (a template per lesson, kept warm between calls;
    ``pair``: the templates to use instead, the verdicts' and the demonstrations')."""
    from . import engine
    from .template import shared_pair

    for name in THREAD_VARIABLES:  # the workers share the cores
        os.environ.setdefault(name, "1")
    drawing = _WORKER.get("drawing")
    if drawing is not None:  # hypothesis draws in one thread at a time
        drawing.join()
    template, demos = pair or shared_pair(lesson, isolation)
    nb = json.loads(nb_json)
    return engine.grade(nb, template, limits, files, student, demos).as_dict()


def _grade(limits: Limits, nb_json: str, files: dict[str, bytes], student: str) -> dict:
    worker = _WORKER
    return grade(worker["lesson"], worker["isolation"], limits, nb_json, files, student,
                 worker.get("pair"))  # fmt: skip


class Pool(Workers):
    """``workers`` local grading processes for one lesson (see the module doc).

    Each worker grades one submission at a time, so its BLAS and OpenMP libraries get one thread
    (unless the environment already says otherwise): the workers share the cores. Their template
    starts warming at once; the limits come with each submission, so a batch can start its pool
    before it has read the course's configuration.

    A worker process killed from outside is started again, and what it held sent again
    (:mod:`autograder.respawn`), :attr:`~autograder.respawn.Processes.RESTARTS` times a batch;
    the next break loses the pool. A submission cannot break it: its code runs in a sandbox of
    its own, not in the worker.
    """

    def __init__(self, workers: int, lesson: str, isolation: str):
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, "1")
        self.templates: tuple = ()
        ctx = mp.get_context("spawn")
        if threading.active_count() == 1:  # no other thread holds a lock a fork would copy
            # A template that cannot be started here (no user id left to claim, say), or checks
            # that cannot be drawn: each worker tries for itself, and says why with the first
            # submission, as spawned workers do.
            with contextlib.suppress(Exception):
                self.templates = _shared_templates(lesson, isolation)
            with contextlib.suppress(Exception):
                _preload(lesson)
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)  # the BLAS loaded here keeps the threads it started with
            ctx = mp.get_context("fork")

        def start(again: bool) -> cf.ProcessPoolExecutor:
            # Started again, spawned, each worker with a template of its own: the batch runs
            # threads by then.
            return cf.ProcessPoolExecutor(
                max_workers=workers, mp_context=mp.get_context("spawn") if again else ctx,
                initializer=_init, initargs=(lesson, isolation, () if again else self.templates),
            )  # fmt: skip

        self.sending = Processes(start, _grade, RESTARTED)
        for _ in range(workers):
            self.executor.submit(_ping)

    LOST = (cf.BrokenExecutor, cf.CancelledError)

    @property
    def executor(self) -> cf.ProcessPoolExecutor:
        """The worker processes, as they are now."""
        return self.sending.executor

    def gone(self, error: BaseException) -> str:
        restarts = self.sending.restarts
        died = f"died {restarts + 1} times" if restarts else "died"
        return f"a worker process of the batch {died} (killed from outside: out of memory?)"

    def close(self) -> None:
        self.sending.close()
        for template in self.templates:
            if template is not None:
                template.close()
        self.templates = ()


RESTARTED = (
    "attn-grade batch: a worker process of the batch died (killed from outside: out of memory?); "
    "the workers were started again, and the {n} notebook(s) they held sent again (restart "
    "{restart} of the {of} a batch gets)"
)


def _shared_templates(lesson: str, isolation: str) -> tuple:
    """The templates the workers share: the verdicts' and, for a lesson whose demonstrations
    need its own exercises (:func:`autograder.view.has_demos`), the demonstrations' (else None).
    They warm in their own processes while the batch goes on."""
    from . import view
    from .template import Template

    template = Template(lesson, isolation, wait=False, shared=True)
    try:
        demos = view.has_demos(lesson) and Template(
            lesson, isolation, demos=True, wait=False, shared=True
        )
    except BaseException:
        template.close()
        raise
    return template, demos or None


def start(lesson: str, workers: int, isolation: str, dask: str | None = None) -> Pool | DaskPool:
    """A batch's workers for ``lesson``, started now (a Dask cluster's when ``dask`` names one,
    else ``workers`` local processes): their templates warm while the batch loads nbgrader."""
    if dask:
        return DaskPool(dask, lesson, isolation)
    return Pool(max(1, workers), lesson, isolation)


GATEWAY = "gateway:"  # gateway:NAME, a Dask Gateway cluster by its name


class DaskPool(Workers):
    """The workers of a Dask cluster (see the module doc): a scheduler's ``address``,
    ``local:N``, or ``gateway:NAME``."""

    def __init__(self, address: str, lesson: str, isolation: str):
        from distributed import Client, LocalCluster
        from distributed.client import ClosedClientError
        from distributed.comm import CommClosedError, resolve_address

        self.LOST = (cf.CancelledError, ClosedClientError, CommClosedError)
        self.address = address
        self.task = (lesson, isolation)
        # A scheduler lost mid-batch: the batch says so in one line (Workers.lost); the client's
        # own logs of it (a traceback for the closed connection, its attempts to reconnect) go.
        for name in ("distributed.batched", "distributed.client"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self.cluster = self.gateway_cluster = self.warming = self.scratch = None
        self.wait = worker_wait()
        self.sending = Reconnecting(self)
        if address.startswith("gateway://"):  # what a Gateway cluster prints as its address
            raise PoolError(
                f"{address} is a Dask Gateway cluster's, reachable only with the credentials the "
                f"gateway hands out: pass --dask gateway:{address.rstrip('/').rsplit('/', 1)[-1]}"
            )
        if address.startswith(GATEWAY):
            self.client = self._through_gateway(address[len(GATEWAY) :])
            self._warm()
            return
        if address.startswith("local:"):
            workers = int(address.split(":", 1)[1])
            # Its scheduler's and workers' scratch space, removed with the cluster: Dask's own
            # (TMPDIR/dask-scratch-space, shared by every cluster of the machine) would stay.
            self.scratch = tempfile.TemporaryDirectory(prefix="attn-grade-dask-")
            here = {"local_directory": self.scratch.name}
            self.cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True,
                host="127.0.0.1", dashboard_address=None,
                scheduler_kwargs={**QUIET_SCHEDULER, **here}, **here,
            )  # fmt: skip
            address = self.cluster.scheduler_address
        try:
            resolve_address(address)  # malformed, or a host name that does not resolve: at once
            self.client = Client(address, set_as_default=False)
        except (OSError, ValueError) as error:  # out of reach (after Dask's timeout), malformed
            self._close_cluster()
            raise PoolError(f"cannot reach the Dask scheduler at {address}: {error}") from None
        self._warm()

    def _warm(self) -> None:
        """Have every worker, and every worker that joins during the batch, start its templates
        now (:mod:`autograder.dask_warm`)."""
        from .dask_warm import Leash, Warm

        self.warming = Warm(*self.task, owner=self.client.id)  # the batch's own
        leash = Leash(self.warming.name, self.client.id)  # first: a batch killed at once is held
        try:
            self.client.register_plugin(leash, name=leash.name)
        except Exception:  # noqa: BLE001 — a scheduler without the course installed refuses it
            self.warming = Warm(*self.task)  # the lesson's, which the next batch replaces
        # Workers that cannot load it cannot grade either: their first submission says why.
        with contextlib.suppress(Exception):
            self.client.register_plugin(self.warming, name=self.warming.name)

    def _through_gateway(self, name: str):
        """A client of the Dask Gateway cluster ``name``. The gateway's address and how to log in
        come from Dask's configuration (``gateway.address``, ``gateway.auth``: on a hub, what
        its image or JupyterHub's service set); the cluster's TLS credentials from the gateway.
        The cluster is the instructor's: closing the batch leaves it running."""
        try:
            from dask_gateway import GatewayCluster
            from dask_gateway.client import GatewayClusterError, GatewayServerError
        except ImportError:
            raise PoolError("--dask gateway:NAME needs the dask-gateway package") from None
        try:
            self.gateway_cluster = GatewayCluster.from_name(name, shutdown_on_close=False)
            return self.gateway_cluster.get_client(set_as_default=False)
        except (OSError, ValueError, GatewayClusterError, GatewayServerError) as error:
            self._close_gateway()
            raise PoolError(f"cannot reach the Dask Gateway cluster {name!r}: {error}") from None

    def _close_gateway(self) -> None:
        """Let go of the Gateway cluster, and leave it running. dask-gateway's ``Gateway``
        closes itself again when collected and fails there on its stopped event loop (printed
        as "Exception ignored ... the loop is not running"); without its loop runner the
        second close is skipped."""
        cluster, self.gateway_cluster = self.gateway_cluster, None
        gateway = getattr(cluster, "gateway", None)
        if cluster is not None and gateway is not None:
            cluster.close(shutdown=False)
        if gateway is not None and hasattr(gateway, "_loop_runner"):
            del gateway._loop_runner

    @property
    def workers(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    @property
    def where(self) -> str:
        """The cluster, in words."""
        if self.address.startswith(GATEWAY):
            return f"the Dask Gateway cluster {self.address[len(GATEWAY) :]}"
        return f"the Dask scheduler at {self.address}"

    def gone(self, error: BaseException) -> str:
        if isinstance(error, NoWorker):
            return f"{self.where} had no worker for {error.seconds:g} s"
        return f"{self.where} was lost"

    def result_of(self, future):
        """``future``'s result, the cluster watched meanwhile: one that has had no worker for
        :func:`worker_wait` seconds on end is lost (:class:`NoWorker`), for no worker is coming
        to grade what the batch sent (Dask would hold it for ever)."""
        idle_since = None
        while True:
            try:
                return future.result(timeout=WATCH)
            except TimeoutError:  # not yet: is there a worker to grade it?
                pass
            if self._has_worker():
                idle_since = None
                continue
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= self.wait:
                raise NoWorker(self.wait)

    def _has_worker(self) -> bool:
        """Whether the cluster has a worker now; True when that cannot be told (the connection to
        the scheduler lost: Dask then cancels what was sent, which the batch waits for)."""
        if self.client.status != "running":
            return True
        try:
            return bool(self.client.nthreads())
        except Exception:  # noqa: BLE001 — the connection lost as it was asked
            return True

    def reconnected(self) -> None:
        """Once the client lost its connection to the scheduler: wait while Dask connects it
        again (for its ``distributed.comm.timeouts.connect``), warm the workers again (the
        leash let the plugin go as the client left) and wait for a worker (a scheduler started
        again has none until they join it). Raise :class:`concurrent.futures.CancelledError`
        (the pool is lost) if the connection does not come back, :class:`NoWorker` if no worker
        comes for :func:`worker_wait`, as for a cluster that loses its workers mid-batch."""
        import dask
        from dask.utils import parse_timedelta

        wait = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) + 10
        deadline = time.monotonic() + wait
        while self.client.status == "connecting" and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.client.status != "running":
            raise cf.CancelledError(f"no connection again within {wait:.0f} s")
        self._warm()
        try:
            self.client.wait_for_workers(1, timeout=self.wait)
        except TimeoutError:
            raise NoWorker(self.wait) from None
        except Exception as error:  # noqa: BLE001 — the connection lost again as it waited
            raise cf.CancelledError(f"no worker within {self.wait:g} s: {error}") from None

    def close(self) -> None:
        if self.client is None:
            return
        if not self.lost:  # a lost scheduler would be waited for, to hear what it cannot
            with contextlib.suppress(Exception):  # the cluster may be gone: nothing to warm
                self.client.unregister_worker_plugin(self.warming.name)
            self.client.close()
        else:  # closing without waiting out the client's attempts to reconnect (30 s)
            with contextlib.suppress(Exception):
                self.client.close(timeout=5)
        self._close_gateway()
        self._close_cluster()
        self.client = None

    def _close_cluster(self) -> None:
        """Close the cluster of ``local:N`` and remove its scratch space."""
        if self.cluster is not None:
            self.cluster.close()
        if self.scratch is not None:
            self.scratch.cleanup()
        self.cluster = self.scratch = None


WATCH = 5.0  # seconds between two looks at a cluster's workers while a result is waited for


def worker_wait() -> float:
    """Seconds a batch waits for its Dask cluster to have a worker, mid-batch or once connected
    again: Dask's setting ``attn-grade.worker-wait`` (the environment's
    ``DASK_ATTN_GRADE__WORKER_WAIT``), ten minutes unless set, for an adaptive cluster may start
    its first worker only once the batch has sent it work."""
    import dask
    from dask.utils import parse_timedelta

    setting = dask.config.get("attn-grade.worker-wait", "10 minutes")
    try:
        seconds = parse_timedelta(setting)
    except (KeyError, ValueError, TypeError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise PoolError(f"Dask's setting attn-grade.worker-wait is {setting!r}, not a time (90s, "
                        "10 minutes)")  # fmt: skip
    return float(seconds)


class NoWorker(cf.CancelledError):
    """The cluster has had no worker for ``seconds`` on end: the pool is lost."""

    def __init__(self, seconds: float):
        super().__init__(f"no worker for {seconds:g} s")
        self.seconds = seconds


DISCONNECTED = "scheduler-connection-lost"  # Dask's reason for the futures it cancels


class Reconnecting(Resending):
    """A :class:`DaskPool`'s work. Dask cancels every future of a client that loses its
    connection to the scheduler, even for a moment, and the scheduler drops their tasks; once
    the client is connected again (:meth:`DaskPool.reconnected`), the work whose result had not
    been taken is sent again, :attr:`~autograder.respawn.Resending.RESTARTS` times a batch."""

    def __init__(self, pool: DaskPool):
        super().__init__(grade, RECONNECTED.replace("{where}", pool.where))
        self.pool = pool

    def _submit(self, *args):
        return self.pool.client.submit(self.task, *self.pool.task, *args, pure=False, retries=1)

    def _broke(self, error: BaseException | None) -> bool:
        return isinstance(error, cf.CancelledError) and getattr(error, "reason", "") == DISCONNECTED

    def _dropped(self, future) -> bool:
        return future.cancelled()  # (a result that came, not yet taken, is cancelled too)

    def _spent(self) -> BaseException:
        return cf.CancelledError(f"the connection was lost {self.restarts + 1} times")

    def _again(self) -> None:
        self.pool.reconnected()

    def _wait(self, future):
        return self.pool.result_of(future)


RECONNECTED = (
    "attn-grade batch: the connection to {where} was lost and came back; the {n} notebook(s) "
    "sent to the cluster and not graded yet were sent again (reconnection {restart} of the "
    "{of} a batch gets)"
)
