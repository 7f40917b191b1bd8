"""Worker processes that outlive one of them killed from outside.

A :class:`concurrent.futures.ProcessPoolExecutor` one of whose processes is killed (the system's
out-of-memory killer, say) is broken for good: every result still to come fails with it, and so
does everything sent to it later. :class:`Processes` starts the processes again and sends again
the work whose result had not come, as Dask does for a worker it lost, :attr:`Processes.RESTARTS`
times; past that :class:`concurrent.futures.BrokenExecutor` is raised, as it was. Each restart
says so in one line on stderr, above any progress bar.

``attn-grade batch``'s local pool (:class:`autograder.pool.Pool`) and ``attn-grade feedback``
(:mod:`autograder.class_feedback`) run on it. Nothing a student wrote runs in these processes
(a notebook's code runs in a sandbox of its own), so a student cannot break them.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any


class Sent:
    """Work sent to the processes: its arguments (to send it again if its process dies) and the
    future of its result."""

    def __init__(self, args: tuple, order: int):
        self.args, self.order = args, order
        self.future: cf.Future = _broken()  # until it is sent


class Processes:
    """Processes that run ``task``, started by ``start(again)`` (``again``: after a break); each
    restart prints ``said``, formatted with ``n`` (the work sent again), ``restart`` and ``of``."""

    RESTARTS = 3  # breaks it gets over; the next one is raised

    def __init__(self, start: Callable[[bool], cf.ProcessPoolExecutor], task: Callable, said: str):
        self.start, self.task, self.said = start, task, said
        self.restarts = 0
        # Sent, by order, their results not yet taken; held by the caller only (work it stopped
        # waiting for is not sent again, nor kept)
        self.sent: weakref.WeakValueDictionary[int, Sent] = weakref.WeakValueDictionary()
        self.order = itertools.count()
        self.executor = start(False)

    def submit(self, *args) -> Sent:
        """Send ``task(*args)`` to a process; the caller keeps what this returns until it has
        taken its :meth:`result`."""
        sent = Sent(args, next(self.order))
        self.sent[sent.order] = sent
        if not self._send(sent):  # broken since the last result was taken
            self._restart()  # which sends it, with the rest
        return sent

    def result(self, sent: Sent) -> Any:
        """The result of ``sent`` (or the error the task raised), sent again after each break."""
        while True:
            future = sent.future
            try:
                return future.result()
            except cf.BrokenExecutor:
                if sent.future is future:  # not sent again yet
                    self._restart()
            finally:
                if _came(future):
                    self.sent.pop(sent.order, None)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)  # a second call does nothing

    def _send(self, sent: Sent) -> bool:
        try:
            sent.future = self.executor.submit(self.task, *sent.args)
        except cf.BrokenExecutor:
            return False
        return True

    def _restart(self) -> None:
        """Start the processes again and send again what had not come; raise
        :class:`concurrent.futures.BrokenExecutor` once they broke :attr:`RESTARTS` times."""
        _let_go(self.executor)
        if self.restarts >= self.RESTARTS:
            raise cf.BrokenExecutor(f"the worker processes died {self.restarts + 1} times")
        self.restarts += 1
        self.executor = self.start(True)
        held = [self.sent.get(order) for order in sorted(self.sent.keys())]
        again = [sent for sent in held if sent is not None and not _came(sent.future)]
        for sent in again:
            if not self._send(sent):  # broken again at once: the next result restarts it
                sent.future = _broken()
        from tqdm import tqdm

        said = self.said.format(n=len(again), restart=self.restarts, of=self.RESTARTS)
        tqdm.write(said, file=sys.stderr)


def _let_go(executor: cf.ProcessPoolExecutor) -> None:
    """Shut a broken executor down without waiting, and drain its queue of work: the thread
    that feeds the queue may be stuck writing a notebook to a pipe its dead workers no longer
    read, and the executor's own thread waits for it, as does the interpreter at exit (CPython
    issue 94777, fixed in later 3.11 releases and 3.12; on Debian's 3.11.2 a batch whose worker
    was killed hung at exit)."""
    reader = getattr(getattr(executor, "_call_queue", None), "_reader", None)  # (shutdown drops it)
    executor.shutdown(wait=False, cancel_futures=True)
    if reader is not None:
        threading.Thread(target=_drain, args=(reader,), daemon=True, name="attn-drain").start()


def _drain(reader) -> None:
    """Read and drop what a broken executor's queue still holds, until it is closed."""
    with contextlib.suppress(Exception):
        while True:
            reader.recv_bytes()


def _came(future: cf.Future) -> bool:
    """Whether ``future`` holds a result or the task's own error (not a broken pool's)."""
    if not future.done() or future.cancelled():  # (cancelled: by the broken pool's shutdown)
        return False
    return not isinstance(future.exception(), cf.BrokenExecutor)


def _broken() -> cf.Future:
    future = cf.Future()
    future.set_exception(cf.BrokenExecutor("the worker processes died as they started"))
    return future
