"""Work sent again when the workers that held it were lost and are had again.

A :class:`concurrent.futures.ProcessPoolExecutor` one of whose processes is killed (the system's
out-of-memory killer, say) is broken for good: every result still to come fails with it, and so
does everything sent to it later. :class:`Processes` starts the processes again and sends again
the work whose result had not come, as Dask does for a worker it lost, :attr:`Resending.RESTARTS`
times; past that :class:`concurrent.futures.BrokenExecutor` is raised, as it was. Each restart
says so in one line on stderr, above any progress bar.

``attn-grade batch``'s local pool (:class:`autograder.pool.Pool`) and ``attn-grade feedback``
(:mod:`autograder.class_feedback`) run on it. Nothing a student wrote runs in these processes
(a notebook's code runs in a sandbox of its own), so a student cannot break them.
:class:`Resending` is what it shares with a Dask cluster's work, which a lost connection to the
scheduler cancels (:class:`autograder.pool.Reconnecting`).
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
    """Work sent to the workers: its arguments (to send it again if its workers are lost) and
    the future of its result."""

    def __init__(self, args: tuple, order: int):
        self.args, self.order = args, order
        self.future: Any = None  # until it is sent


class Resending:
    """Work sent to workers that can be lost all at once and had again. Each piece is kept until
    its result is taken; when the workers are lost, they are had again and every piece whose
    result had not come is sent again, in order, :attr:`RESTARTS` times; each time ``said`` is
    printed, formatted with ``n`` (the work sent again), ``restart`` and ``of``. A kind of
    workers says how to send (:meth:`_submit`), what a loss looks like (:meth:`_broke`,
    :meth:`_dropped`) and how to have them again (:meth:`_again`)."""

    RESTARTS = 3  # losses it gets over; the next one is raised

    def __init__(self, task: Callable, said: str):
        self.task, self.said = task, said
        self.restarts = 0
        # Sent, by order, their results not yet taken; held by the caller only (work it stopped
        # waiting for is not sent again, nor kept)
        self.sent: weakref.WeakValueDictionary[int, Sent] = weakref.WeakValueDictionary()
        self.order = itertools.count()

    def _submit(self, *args) -> Any:
        """A future of ``task(*args)`` on the workers; raises what :meth:`_broke` tells when
        they are lost."""
        raise NotImplementedError

    def _broke(self, error: BaseException | None) -> bool:
        """Whether ``error``, from a result or a send, means the workers were lost."""
        raise NotImplementedError

    def _dropped(self, future: Any) -> bool:
        """Whether ``future``'s work was lost with its workers (and is to be sent again)."""
        return not self._came(future)

    def _again(self) -> None:
        """Have the workers again, after a loss; raise what tells they cannot be had (the last
        loss's error once :attr:`RESTARTS` are spent: :meth:`_spent`)."""
        raise NotImplementedError

    def _wait(self, future: Any) -> Any:
        """``future``'s result, once it comes (a kind of workers may watch them meanwhile)."""
        return future.result()

    def _spent(self) -> BaseException:
        """The error raised at a loss once :attr:`RESTARTS` are spent."""
        raise NotImplementedError

    def submit(self, *args) -> Sent:
        """Send ``task(*args)`` to the workers; the caller keeps what this returns until it has
        taken its :meth:`result`."""
        sent = Sent(args, next(self.order))
        self.sent[sent.order] = sent
        if not self._send(sent):  # lost since the last result was taken
            self._restart()  # which sends it, with the rest
        return sent

    def result(self, sent: Sent) -> Any:
        """The result of ``sent`` (or the error the task raised), sent again after each loss."""
        while True:
            future = sent.future  # (None: not sent, the workers lost as it was)
            if future is not None:
                try:
                    return self._wait(future)
                except Exception as error:
                    if not self._broke(error):
                        raise
                finally:
                    if self._came(future):
                        self.sent.pop(sent.order, None)
            if sent.future is future:  # not sent again since
                self._restart()

    def _send(self, sent: Sent) -> bool:
        try:
            sent.future = self._submit(*sent.args)
        except Exception as error:
            if not self._broke(error):
                raise
            return False
        return True

    def _restart(self) -> None:
        """Have the workers again and send again what had not come; raise :meth:`_spent` once
        they were lost :attr:`RESTARTS` times."""
        if self.restarts >= self.RESTARTS:
            raise self._spent()
        self.restarts += 1
        self._again()
        held = [self.sent.get(order) for order in sorted(self.sent.keys())]
        again = [s for s in held if s is not None and (s.future is None or self._dropped(s.future))]
        for sent in again:
            if not self._send(sent):  # lost again at once: the next result restarts them
                sent.future = None
        from tqdm import tqdm

        said = self.said.format(n=len(again), restart=self.restarts, of=self.RESTARTS)
        tqdm.write(said, file=sys.stderr)

    def _came(self, future: Any) -> bool:
        """Whether ``future`` holds a result or the task's own error (not a lost worker's)."""
        if future is None or not future.done() or future.cancelled():  # (by a loss, a shutdown)
            return False
        return not self._broke(future.exception())


class Processes(Resending):
    """Processes that run ``task``, started by ``start(again)`` (``again``: after a break); when
    one dies, the executor is broken, and new processes are started (see the module doc)."""

    def __init__(self, start: Callable[[bool], cf.ProcessPoolExecutor], task: Callable, said: str):
        super().__init__(task, said)
        self.start = start
        self.executor = start(False)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)  # a second call does nothing

    def _submit(self, *args) -> cf.Future:
        return self.executor.submit(self.task, *args)

    def _broke(self, error: BaseException | None) -> bool:
        return isinstance(error, cf.BrokenExecutor)

    def _spent(self) -> BaseException:
        _let_go(self.executor)
        return cf.BrokenExecutor(f"the worker processes died {self.restarts + 1} times")

    def _again(self) -> None:
        _let_go(self.executor)
        self.executor = self.start(True)


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
