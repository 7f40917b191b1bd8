"""Run one notebook's cells in a sandbox, with every limit enforced from this side.

:class:`Runner` sends one request at a time (:mod:`autograder.protocol`) and waits for its reply
until a deadline that nothing the sandbox sends can move: the per-cell (or per-call) timeout, and
the notebook's whole budget, whichever comes first. While it waits it watches the sandbox's memory
(:mod:`autograder.limits`). Whatever goes wrong is the sandbox's fault and is recorded against the
cell (or check) at hand:

* a cell over time is interrupted (SIGINT, as Jupyter does); if it does not stop, or a call over
  time, the sandbox is killed;
* a dead sandbox (``os._exit``, a crash, a limit), an unasked or malformed message, a reply out of
  turn: the sandbox is killed.

After a kill the next request starts a fresh sandbox and replays, silently, the cells that ran
cleanly before, so later cells still run (up to ``Limits.restarts`` times). A replay is held to
the notebook's budget, not to each cell's timeout, which those cells met once already. What a
cell shows is cleaned and capped here (:mod:`autograder.outputs`), however much the sandbox sent.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from attnlib.checks._core import Abort
from attnlib.checks.memory import Used

from . import limits as limits_mod
from . import outputs as outputs_mod
from . import protocol
from .limits import Limits
from .template import Sandbox, SandboxError, Template

TICK = 0.05  # seconds between memory checks while waiting
# A request that ran out of time while the learner's process waited, ready to run and within its
# CPU quota, this share of the time for a processor others held, and the sandbox as a whole got
# less than the rest of its quota (of one processor, where it has none): the host, not the
# notebook, may be to blame (the batch grades such a student again, alone). A sandbox whose own
# processes crowd out the one running its cells used its share, and is not starved; nor is one
# that gave its processor away (pinned itself to fewer processors, lowered its priority: see
# Runner._see_scheduling). What the sandbox used is its cgroup's count, or its processes' from
# /proc where no cgroup counts it (a normal user): the same rule with a quota or without.
STARVED = 0.25
# Memory a trusted function called back may add to the grader's process (its address space),
# on the learner's arguments: bounded ones can ask for a product of their sizes.
CALLBACK_MEMORY = 2**30
Callbacks = dict[str, Callable[..., object]]


class Fault(Abort):
    """The sandbox failed a request: an error output for the cell or check at hand."""

    def __init__(self, ename: str, evalue: str):
        super().__init__(f"{ename}: {evalue}")
        self.ename, self.evalue = ename, evalue

    def output(self) -> dict:
        return outputs_mod.error(self.ename, self.evalue)


class _Late(Exception):
    """No reply before the deadline."""


@dataclass
class Ran:
    """What one cell did: its outputs (cleaned, capped) and execution count."""

    outputs: list[dict] = field(default_factory=list)
    execution_count: int | None = None


@dataclass
class Runner:
    """Drives one notebook in a sandbox from ``template``; see the module doc."""

    template: Template
    limits: Limits
    files: dict[str, bytes] = field(default_factory=dict)
    student: str = ""  # who submitted: the sandbox's ATTN_STUDENT (numbers of their own)
    started: float = field(default_factory=time.monotonic)
    box: Sandbox | None = None
    replay: list[tuple[int, str]] = field(default_factory=list)  # cells that ran cleanly
    launches: int = 0
    kept: int = 0  # output characters kept so far
    notes: list[str] = field(default_factory=list)
    out_of_time: bool = False  # a cell, a call or the budget ran out of time
    uncapped: bool = False  # a sandbox ran without a CPU quota (its neighbours could slow it)
    starved: bool = False  # a request ran out of time waiting for a processor (see STARVED)
    untold: bool = False  # time ran out, and nothing read could say whether it was starved
    weighed: bool = False  # a request that ran out of time was weighed (starved or not)
    given_away: str = ""  # what the notebook did to wait by its own choice (see _see_scheduling)
    peak: int = 0  # most memory seen while measuring (see measure())
    _measuring: bool = False
    _callbacks: dict = field(default_factory=dict)  # key → trusted function, during a request
    _called: int = 0  # callbacks answered during the outstanding request
    _clock: tuple | None = None  # (when, Sandbox.clock()) early in the outstanding request
    _born: tuple | None = None  # (when, Sandbox.clock()) as the sandbox started
    _scheduling: limits_mod.Scheduling | None = None  # the sandbox's, as it started

    @property
    def deadline(self) -> float:
        return self.started + self.limits.budget

    @property
    def crowded(self) -> bool:
        """Out of time, kept from a processor (or with no CPU quota, where the kernel could not
        say whether it was), and not by the notebook's own choice: others may be to blame (the
        batch grades such a student again, alone)."""
        unknown = self.uncapped and self.untold
        return self.out_of_time and not self.given_away and (self.starved or unknown)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    # -- cells --------------------------------------------------------------------------------

    def run(
        self, index: int, source: str, verdicts: dict | None = None, stand_ins: dict | None = None
    ) -> Ran:
        """Run one cell; its outputs, or the fault that stopped it.

        ``verdicts`` are what the cell's ``report``/``check`` calls show; ``stand_ins`` (name →
        trusted function) are bound in the learner's namespace while the cell runs, as the
        verdicts were reached with them (:func:`attnlib.checks.judge`).
        """
        keys = {name: secrets.token_hex(8) for name in stand_ins or {}}
        self._callbacks = {keys[name]: fn for name, fn in (stand_ins or {}).items()}
        self._called = 0
        try:
            reply, _ = self._ask(
                {"op": "run", "cell": index, "source": source, "record": True,
                 "verdicts": verdicts or {}, "stand_ins": keys},
                timeout=self.limits.timeout,
                on_late=self._interrupt,
            )  # fmt: skip
        except Fault as fault:
            return Ran([fault.output()], None)
        except _Interrupted as late:
            ran = self._record(late.reply)
            ran.outputs.append(outputs_mod.error(
                "CellTimeoutError",
                f"this cell ran longer than {self.limits.timeout:g} s and was interrupted",
            ))  # fmt: skip
            return ran
        finally:
            self._callbacks = {}
        ran = self._record(reply)
        if not keys:  # a cell that needed the course's functions cannot be replayed without
            self.replay.append((index, source))
        return ran

    def _record(self, reply: dict) -> Ran:
        budget = max(self.limits.max_output - self.kept, 0)
        cleaned, spent = outputs_mod.clean(reply.get("outputs"), budget)
        self.kept += spent
        count = reply.get("execution_count")
        return Ran(cleaned, count if type(count) is int else None)

    def _interrupt(self, seq: int) -> dict:
        """A cell over time: SIGINT, then a short wait for it to stop on its own."""
        self.box.interrupt()
        reply, _ = self._reply(seq, time.monotonic() + 3)
        return reply

    # -- requests for the checks ---------------------------------------------------------------

    def request(
        self, header: dict, buffers: list[bytes] = (), callbacks: Callbacks | None = None
    ) -> tuple[dict, list[bytes]]:
        """One request about the learner's namespace; :class:`Fault` if the sandbox fails it.

        ``callbacks`` (key → function) are the trusted functions the learner's code may call
        back while this request is outstanding (:mod:`autograder.protocol`, "Callbacks").
        """
        self._callbacks, self._called = dict(callbacks or {}), 0
        try:
            return self._ask(header, buffers, timeout=self.limits.timeout)
        finally:
            self._callbacks = {}

    def measure(
        self, header: dict, buffers: list[bytes] = (), callbacks: Callbacks | None = None
    ) -> tuple[dict, list[bytes], Used]:
        """A request, and what the whole sandbox used: the most memory it held above its level
        before, and the memory it touched (None where the sandbox could clear the kernel's
        marks itself: see :mod:`autograder.sandbox.syscalls`)."""
        box = self._sandbox()
        base, _ = box.memory()
        if box.cgroup is not None:
            box.cgroup.reset_peak()
        touch = limits_mod.TouchedTree(box.child, box.cgroup) if box.watched else None
        self.peak, self._measuring = base, True
        try:
            reply, got = self.request(header, buffers, callbacks)
        finally:
            self._measuring = False
        touched = touch.stop() if touch is not None else None
        top = box.cgroup.peak() if box.cgroup is not None else self.peak
        held = max(top - base, 0)
        # A call touches at least what it adds, though what it gave back before returning left
        # no marks: one call cannot hold nothing new and the next touch nothing it kept.
        return reply, got, Used(held, None if touched is None else max(touched, held))

    # -- the machinery ---------------------------------------------------------------------------

    def _sandbox(self) -> Sandbox:
        if self.box is not None:
            return self.box
        while True:
            if self.launches > self.limits.restarts:
                raise Fault("NotRun", "the notebook's process was restarted too many times")
            if self.left() <= 0:
                self.out_of_time = True
                self.untold |= not self.weighed  # spent between requests, none weighed
                raise Fault("BudgetExceeded", self._budget_text())
            self.launches += 1
            try:
                env = {"ATTN_STUDENT": self.student} if self.student else {}
                self.box = self.template.spawn(self.limits, env=env)
            except SandboxError as error:
                self.notes.append(str(error))
                raise Fault("SandboxError", str(error)) from None
            if self.box.cgroup is None or not self.box.cgroup.cpu_capped:
                self.uncapped = True
            self._scheduling = limits_mod.scheduling(self.box.executor)
            self._born = (time.monotonic(), self.box.clock())
            try:
                self._setup()
                return self.box
            except Fault as fault:
                self.notes.append(f"restarting: {fault.evalue}")
                continue

    def _setup(self) -> None:
        """A fresh sandbox's files, then the replay of the cells that ran cleanly before it.

        Both are held to what is left of the budget, not to a cell's timeout: the cells met
        their timeouts once, and on a host busier than then (a class graded at once) a replayed
        cell may not. Held to its timeout, each fresh sandbox failed the same replay, and one
        kill cost every later cell (NotRun, "restarted too many times").
        """
        names, blobs = {}, []
        for name, data in self.files.items():
            names[name] = len(blobs)
            blobs.append(data)
        # A timeout no shorter than what is left of the budget: _send_and_wait then waits until
        # the budget's deadline, and a replay still going then is BudgetExceeded.
        rest = self.limits.budget
        self._send_and_wait({"op": "setup", "files": names}, blobs, rest)
        for index, source in list(self.replay):
            reply, _ = self._send_and_wait(
                {"op": "run", "cell": index, "source": source, "record": False, "verdicts": {}},
                [],
                rest,
            )
            if not reply.get("ok"):
                raise Fault("ReplayFailed", f"cell {index} failed when replayed")

    def _ask(self, header, buffers=(), *, timeout: float, on_late=None) -> tuple[dict, list[bytes]]:
        self._sandbox()
        reply, got = self._send_and_wait(header, buffers, timeout, on_late)
        if not reply.get("ok") and header.get("op") != "run":
            raise _learner_error(reply)
        return reply, got

    def _send_and_wait(self, header, buffers, timeout: float, on_late=None):
        box = self.box
        budget_bound = self.left() < timeout
        deadline = min(time.monotonic() + timeout, self.deadline)
        self._clock = None
        try:
            seq = box.request(header, buffers)
            try:
                return self._reply(seq, deadline)
            except _Late:
                self.out_of_time = True
                self._see_scheduling()
                kept = self._weigh(box)
                self.starved |= bool(kept) and not self.given_away
                self.untold |= kept is None
                self.weighed |= kept is not None
                if on_late is None or budget_bound:
                    raise
                raise _Interrupted(on_late(seq)) from None
        except _Interrupted:
            raise
        except _Late:
            self._kill()
            if budget_bound:
                raise Fault("BudgetExceeded", self._budget_text()) from None
            what = "this cell" if header.get("op") == "run" else "your code"
            raise Fault(
                "CellTimeoutError" if header.get("op") == "run" else "TimeoutError",
                f"{what} ran longer than {timeout:g} s and was stopped (an infinite loop?)",
            ) from None
        except _OverMemory as over:
            self._kill()
            raise Fault("MemoryLimit", str(over)) from None
        except protocol.Closed:
            self._kill()
            raise Fault("ProcessDied", self._death_text()) from None
        except (protocol.ProtocolError, OSError) as error:
            self._kill()
            raise Fault(
                "ProtocolViolation",
                f"the notebook's process broke the grader's protocol ({error}) and was stopped",
            ) from None

    def _reply(self, seq: int, deadline: float) -> tuple[dict, list[bytes]]:
        sock = self.box.sock
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Late()
            wait = min(left, 0.002 if self._measuring else TICK)
            if select.select([sock], [], [], wait)[0]:
                header, got = protocol.recv(sock, deadline + 1)
                callback = protocol.callback_of(header)
                if callback is None:
                    return protocol.expect_reply(header, seq), got
                self._call_back(*callback, header, got, deadline)
                continue
            if self._clock is None:  # a request that takes a while: where its CPU goes, from now
                self._clock = (time.monotonic(), self.box.clock())
            self._watch()
            self._see_scheduling()

    def _call_back(self, n: int, key: str, header: dict, got: list[bytes], deadline: float) -> None:
        """Answer one callback of the outstanding request (see :meth:`request`), unless the
        trusted function runs past the request's ``deadline`` (then the request is late)."""
        fn = self._callbacks.get(key)
        if fn is None or n != self._called or self._called >= protocol.CALLBACKS:
            raise protocol.ProtocolError(f"an unexpected callback ({key[:40]!r}, #{n})")
        self._called += 1
        for tree in (header.get("args"), header.get("kwargs")):
            if protocol.largest_array(tree) > protocol.CALLBACK_ELEMENTS:
                return self._send_back(n, error=("ValueError", "an array too large for the grader"))
        args = protocol.decode(header.get("args"), got)
        kwargs = protocol.decode(header.get("kwargs"), got)
        if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
            raise protocol.ProtocolError("a malformed callback")
        try:
            with limits_mod.headroom(CALLBACK_MEMORY), _until(deadline):
                result = fn(*args, **{str(k): v for k, v in kwargs.items()})
        except _PastDeadline:
            return None  # no answer: the request is late (the caller's next look at the time)
        except MemoryError:
            return self._send_back(n, error=("MemoryError", (
                f"the grader's function needed more than {CALLBACK_MEMORY / 2**30:g} GiB of "
                "memory for these arguments")))  # fmt: skip
        except Exception as error:  # noqa: BLE001 — the trusted function refused the input
            return self._send_back(n, error=(type(error).__name__, str(error)[:2000]))
        if protocol.largest_in(result) > protocol.CALLBACK_ELEMENTS:
            return self._send_back(n, error=("ValueError", "a result too large for the grader"))
        return self._send_back(n, result=result)

    def _send_back(self, n: int, result: object = None, error: tuple | None = None) -> None:
        if error is not None:
            protocol.send(self.box.sock, {"cb": n, "ok": False, "ename": error[0],
                                          "evalue": error[1]})  # fmt: skip
            return
        blobs: list[bytes] = []
        protocol.send(self.box.sock, {"cb": n, "ok": True,
                                      "result": protocol.encode(result, blobs)}, blobs)  # fmt: skip

    def _weigh(self, box: Sandbox) -> bool | None:
        """Was the request that just ran out of time kept from a processor (:meth:`_starved`)?
        Weighed over the request from its first tick; where that is too short to say (under a
        tick: the budget ran out as the request began), over the sandbox's life. None if
        neither can say."""
        now = time.monotonic()
        for reading in (self._clock, self._born):
            if reading is not None and now - reading[0] >= TICK:
                began, clock = reading
                return self._starved(clock, box.clock(), now - began)
        return None

    def _starved(self, before: tuple, after: tuple, seconds: float) -> bool | None:
        """Did the sandbox wait for processors others held, over ``seconds`` between the two
        :meth:`Sandbox.clock` readings (see :data:`STARVED`)? None if the kernel did not say
        how long its process waited."""
        shares = self._shares(before, after, seconds)
        if shares is None:
            return None
        waited, used = shares
        return waited >= STARVED and (used is None or used < 1 - STARVED)

    def _shares(self, before: tuple, after: tuple, seconds: float) -> tuple | None:
        """(waited, used) over ``seconds`` between two :meth:`Sandbox.clock` readings: the share
        of them the process running the cells waited for a processor, and the share of its
        quota (one processor with none: all one process can use) the whole sandbox used (None
        where nothing counted it). None where the kernel did not say how long it waited."""
        (waited, used), (waited_now, used_now) = before, after
        if waited is None or waited_now is None:
            return None
        quota = (self.limits.cpus or 1.0) * seconds * 1e9
        used_share = None if used is None or used_now is None else (used_now - used) / quota
        return (waited_now - waited) / (seconds * 1e9), used_share

    def _see_scheduling(self) -> None:
        """Has the process running the cells pinned itself to fewer processors, or lowered its
        priority, since its sandbox started? Then a request it runs out of time on waited by the
        notebook's choice, not the host's, and the notebook is not graded again alone. Read from
        outside at every tick of a long request, so a pin let go before the deadline is seen."""
        if self.given_away or self._scheduling is None:
            return
        now = limits_mod.scheduling(self.box.executor)
        if now is not None:
            ours = frozenset(os.sched_getaffinity(0))  # this thread's: the grader's
            self.given_away = now.given_away(self._scheduling, ours) or ""

    def _watch(self) -> None:
        limit = self.limits.memory_mb * 2**20
        held, count = self.box.memory(precise_above=limit)
        if self._measuring:
            self.peak = max(self.peak, held)
        if self.box.cgroup is None and held > limit:
            raise _OverMemory(
                f"the notebook's processes held {held / 2**20:.0f} MB of memory, over the limit "
                f"of {self.limits.memory_mb} MB, and were stopped"
            )

    def _death_text(self) -> str:
        if self.box is not None and self.box.cgroup is not None and self.box.cgroup.out_of_memory():
            return (
                f"the process running this notebook was stopped at its memory limit "
                f"({self.limits.memory_mb} MB)"
            )
        return (
            "the process running this notebook ended (os._exit, a crash, or a limit: "
            f"{self.limits.memory_mb} MB of memory, {self.limits.cpu_seconds} s of CPU)"
        )

    def _budget_text(self) -> str:
        return (
            f"the notebook used up its time budget of {self.limits.budget:g} s "
            "(cells and checks together)"
        )

    def _kill(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None

    def close(self) -> None:
        self._kill()


class _PastDeadline(BaseException):
    """A trusted function called back ran past its request's deadline (a BaseException, so
    no ``except Exception`` of the function's own keeps it running)."""


@contextlib.contextmanager
def _until(deadline: float) -> Iterator[None]:
    """Stop this thread's Python code at ``deadline`` (``time.monotonic()``), raising
    :class:`_PastDeadline`: looked at on every call and return of a function, Python's or C's
    (``sys.setprofile``), so a Python loop stops within moments of it; one long call into C
    (a product of arrays) only as it returns, and memory bounds those (``CALLBACK_MEMORY``)."""
    previous = sys.getprofile()

    def watch(frame, event, arg) -> None:
        if time.monotonic() > deadline:
            raise _PastDeadline()

    sys.setprofile(watch)
    try:
        yield
    finally:
        sys.setprofile(previous)


class _Interrupted(Exception):
    def __init__(self, reply: dict):
        super().__init__("interrupted")
        self.reply = reply


class _OverMemory(Exception):
    pass


# The built-in exceptions a learner's exception may be rebuilt as a subclass of, so that a check
# can tell a NotImplementedError or an AssertionError apart; anything else is an Exception.
BUILTINS = {cls.__name__: cls for cls in (
    AssertionError, NotImplementedError, ValueError, TypeError, IndexError, KeyError,
    ZeroDivisionError, ArithmeticError, OverflowError, FloatingPointError, RuntimeError,
    RecursionError, MemoryError, AttributeError, NameError, LookupError,
)}  # fmt: skip


def _learner_error(reply: dict) -> Exception:
    """The learner's exception, rebuilt as a fresh class of the same name (never looked up),
    deriving from the built-in exception it derived from where that is one of :data:`BUILTINS`.
    """
    import re

    name = re.sub(r"\W", "_", protocol.text_field(reply, "ename", 60)) or "Error"
    if name[0].isdigit():
        name = "_" + name
    base = BUILTINS.get(protocol.text_field(reply, "builtin", 60), Exception)
    return type(name, (base,), {})(protocol.text_field(reply, "evalue", 2000))
