"""The trusted side's handles on a template and on the sandboxes it forks.

:class:`Template` starts ``autograder.sandbox.template`` — inside bubblewrap's view
(:mod:`autograder.view`) when isolation is on — and keeps it warm. :meth:`Template.spawn` gives a
:class:`Sandbox`: a fresh process tree for one submission, with its own namespaces, its own cgroup
when the machine offers one (:class:`~autograder.limits.Cgroup`), limits, and a socket that speaks
:mod:`autograder.protocol`. Closing a sandbox kills every process it started; closing a template
kills the template and its view. Both also die with this process (``--die-with-parent``,
``PR_SET_PDEATHSIG``), so a killed grader leaves nothing running.

Isolation is one of:

* ``"namespaces"`` — bubblewrap + fresh namespaces per submission (the default where possible);
* ``"none"`` — a plain forked process with resource limits, for a learner's own self-check on a
  machine without bubblewrap, or when an instructor explicitly asks for it (``--no-isolation``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from attnlib.checks.memory import small_pages

from . import identity, protocol, view
from . import limits as limits_mod
from .limits import Cgroup, Limits

_CREDS = struct.calcsize("3i")
_serial = itertools.count()


class SandboxError(RuntimeError):
    """A template or sandbox could not be started."""


@dataclass
class Sandbox:
    """One submission's running sandbox (see the module doc)."""

    sock: socket.socket
    child: int  # host pid of the template's child: the root of the sandbox's process tree
    executor: int  # host pid of the process that runs the learner's cells
    cgroup: Cgroup | None = None
    # the executor runs under the filter that keeps the kernel's marks of touched memory
    # (autograder.sandbox.syscalls), seen from here before any learner code ran
    watched: bool = False
    seq: itertools.count = field(default_factory=itertools.count)

    def request(self, header: dict, buffers: list[bytes] = ()) -> int:
        """Send a request; return its sequence number (the reply must echo it)."""
        seq = next(self.seq)
        protocol.send(self.sock, {**header, "seq": seq}, buffers)
        return seq

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.executor, signal.SIGINT)

    def memory(self, precise_above: int | None = None) -> tuple[int, int]:
        """Bytes of memory and processes of the whole sandbox now (see ``tree_memory``)."""
        if self.cgroup is not None:
            return self.cgroup.memory(), len(self.cgroup.pids())
        return limits_mod.tree_memory(self.child, precise_above)

    def clock(self) -> tuple[int | None, int | None]:
        """Nanoseconds the process running the learner's cells has waited for a processor that
        its CPU quota allowed it (others had them), and of CPU the whole sandbox has used (its
        cgroup's count, or, where none counts it, its processes' from /proc: ``tree_cpu``);
        each None where the kernel does not say."""
        delay = limits_mod.run_delay(self.executor)
        throttled = self.cgroup.throttled() if self.cgroup is not None else 0
        used = self.cgroup.used() if self.cgroup is not None else None
        if used is None:
            used = limits_mod.tree_cpu(self.child)
        return (None if delay is None else delay - throttled), used

    def close(self) -> None:
        """Kill every process of the sandbox and wait until they are gone. Killed before the
        socket closes: the executor ends when it does, and with it the sandbox's first process,
        whose orphans (without a PID namespace) would then leave the tree unkilled."""
        pids = limits_mod.kill_tree(self.child)
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        end = time.monotonic() + 5
        while any(limits_mod.alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.005)


class Template:
    """A warm template process for one lesson (see the module doc)."""

    def __init__(
        self,
        lesson: str,
        isolation: str = "namespaces",
        demos: bool = False,
        wait: bool = True,
        shared: bool = False,
    ):
        """Start the template; with ``wait``, return once it is warm, else at once: it warms in
        its own process meanwhile, and :meth:`ready` (or the first :meth:`spawn`) waits for it.

        A ``shared`` template serves the graders forked from this process as well
        (:class:`Attached`; the local pool's workers), each with a user id of its own; its
        "ready" is then left unread, for them to see too.
        """
        if isolation not in ("namespaces", "none"):
            raise ValueError(f"isolation is 'namespaces' or 'none', not {isolation!r}")
        self.lesson, self.isolation = lesson, isolation
        self.demos = demos  # the demonstrations' edition (view.demo_files): no verdicts here
        self.shared = shared
        self.claim: identity.Claim | None = None
        self.folder: str | None = None  # the edition's links, without a view
        self.process: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self._starting: float | None = None  # the deadline of a start not yet reported ready
        self._launch()
        if wait:
            self.ready()

    @property
    def isolated(self) -> bool:
        return self.isolation == "namespaces"

    def _start(self) -> None:
        self._launch()
        self.ready()

    def _launch(self, timeout: float = 300.0) -> None:
        """Start the template's process; :meth:`ready` waits ``timeout`` seconds for it."""
        ours, theirs = socket.socketpair()
        if self.isolated:
            problem = view.probe()
            if problem:
                raise SandboxError(problem)
            if os.geteuid() == 0:
                self.claim = identity.claim()
            uid = self.claim.uid if self.claim else None
            argv = view.command(
                self.lesson, theirs.fileno(), uid, demos=self.demos, sets_uids=self.shared
            )
            env = None
        else:
            self.folder = tempfile.mkdtemp(prefix="attn-grade-edition-")
            view.materialize(self.lesson, Path(self.folder), self.demos)
            argv = view.template_argv(theirs.fileno(), isolate=False)
            env = {**view.environment(self.lesson), "PYTHONPATH": self.folder}
        self.process = subprocess.Popen(
            argv,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.folder,  # not this process's: the real attnlib may sit there
            start_new_session=True,
            preexec_fn=_before_the_template,
        )
        theirs.close()
        self.control = ours
        self._starting = time.monotonic() + timeout

    def ready(self) -> None:
        """Wait until the template is warm (at once if it is); raise :class:`SandboxError` if it
        cannot start."""
        if self._starting is None:
            return
        deadline, self._starting = self._starting, None
        try:
            if self.shared:  # the message stays for the graders attached to it to see
                if not select_ready(self.control, deadline):
                    raise protocol.Timeout("the template was not ready in time")
                if not self.control.recv(1, socket.MSG_PEEK):
                    raise protocol.Closed("the template closed its socket")
            else:
                ready, _ = protocol.recv(self.control, deadline)
                if ready.get("ev") != "ready":
                    raise protocol.ProtocolError("the template did not say it was ready")
        except protocol.ProtocolError as error:
            detail = self._stderr()
            self.close()
            raise SandboxError(f"the sandbox template did not start: {error}. {detail}") from None
        if self.process.stderr is not None:
            self.process.stderr.close()

    def _stderr(self) -> str:
        if self.process is None or self.process.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            self.process.kill()
            return self.process.stderr.read().decode("utf-8", "replace")[-2000:]
        return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self, limits: Limits, timeout: float = 30.0, env: dict | None = None) -> Sandbox:
        """A fresh sandbox for one submission; ``env`` adds to its environment (only the names
        the sandbox accepts: :data:`autograder.sandbox.template.ENV`)."""
        self.ready()
        if not self.alive():
            self.close()
            self._start()
        uid = self.claim.uid if self.shared and self.claim else None
        return _spawn(self.control, self.isolated, limits, time.monotonic() + timeout, env, uid)

    def close(self) -> None:
        self._starting = None  # a start not waited for is abandoned, not awaited later
        if self.control is not None:
            with contextlib.suppress(OSError):
                self.control.close()
            self.control = None
        if self.process is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.process.kill()
            with contextlib.suppress(Exception):
                self.process.wait(timeout=10)
            self.process = None
        if self.claim is not None:
            self.claim.release()
            self.claim = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> Template:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _spawn(
    control: socket.socket,
    isolated: bool,
    limits: Limits,
    deadline: float,
    env: dict | None,
    uid: int | None,
) -> Sandbox:
    """Ask the template behind ``control`` for a sandbox that runs as ``uid`` (None: as the
    template); put it in its cgroup, give it its limits, and wait until it can take requests."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    cgroup = None
    try:
        socket.send_fds(control, [protocol.fork_request(uid)], [theirs.fileno()])
        theirs.close()
        child = _hello(ours, deadline)
        if isolated:
            cgroup = Cgroup.create(
                f"attn-grade-{os.getpid()}-{next(_serial)}",
                limits.memory_mb * 2**20,
                limits.processes,
                limits.cpus,
            )
            if cgroup is not None:
                cgroup.add(child)
        keep = view.under_tmp() if isolated else []
        protocol.send(ours, {"op": "go", "limits": limits.for_sandbox(), "keep": keep,
                             "env": dict(env or {})})  # fmt: skip
        executor = _hello(ours, deadline)
    except (OSError, protocol.ProtocolError) as error:
        with contextlib.suppress(OSError):
            ours.close()
        with contextlib.suppress(OSError):
            theirs.close()
        if cgroup is not None:
            cgroup.remove()
        raise SandboxError(f"a sandbox could not be started: {error}") from None
    return Sandbox(ours, child, executor, cgroup, watched=limits_mod.filters(executor) > 0)


class Attached:
    """A grader's handle on a :class:`Template` started ``shared`` by the process it was forked
    from (the batch, for the local pool's workers): one warm template for all of them instead of
    one each. It spawns sandboxes as :meth:`Template.spawn` does, each as the user id this grader
    claims for itself (as root), so sandboxes of two graders never share one. Should the shared
    template fail it, the grader starts a template of its own and goes on with that.
    """

    def __init__(self, template: Template):
        if not template.shared or template.control is None:
            raise ValueError("only a shared template that is running can be attached to")
        self.lesson, self.isolation = template.lesson, template.isolation
        self.demos, self.isolated = template.demos, template.isolated
        self.control = template.control  # this process's copy of the owner's control socket
        self.starting = template._starting or time.monotonic()  # when its start times out
        self.claim = identity.claim() if template.claim is not None else None
        self.own: Template | None = None  # this grader's own template, once the shared one failed

    def ready(self) -> None:
        """Wait until the shared template is warm: it then says so on the control socket, where
        the message stays unread, so that every grader sees it (or until the start times out:
        the first spawn then fails and this grader starts its own template)."""
        if self.own is None:
            select_ready(self.control, self.starting)

    def spawn(self, limits: Limits, timeout: float = 30.0, env: dict | None = None) -> Sandbox:
        if self.own is None:
            self.ready()
            uid = self.claim.uid if self.claim else None
            deadline = time.monotonic() + timeout
            try:
                return _spawn(self.control, self.isolated, limits, deadline, env, uid)
            except SandboxError:
                self.own = Template(self.lesson, self.isolation, demos=self.demos)
        return self.own.spawn(limits, timeout, env)

    def close(self) -> None:
        """Let go of the shared template (its owner stops it) and close this grader's own."""
        if self.own is not None:
            self.own.close()
            self.own = None
        if self.claim is not None:
            self.claim.release()
            self.claim = None


_shared: dict[tuple[str, str, bool, int], Template] = {}
_spare: dict[tuple[str, str, bool], list[Template]] = {}  # warmed ahead, for the next thread
_lock = threading.Lock()  # for both: a Dask worker starts spares on its event loop's thread


def shared(lesson: str, isolation: str, demos: bool = False, wait: bool = True) -> Template:
    """This thread's warm template for ``lesson``: a spare warmed ahead (:func:`warm`), else one
    started now; closed at exit. Without ``wait``, still warming when returned (see
    :class:`Template`).

    One per thread: a template serves one request at a time, and a Dask worker may grade on
    several threads at once.
    """
    key = (lesson, isolation, demos, threading.get_ident())
    with _lock:
        template, stale = _shared.get(key), None
        if template is None or not template.alive():
            stale = _shared.pop(key, None)
            template = _take_spare(key[:3])
            if template is not None:
                _shared[key] = template
    if stale is not None:
        stale.close()
    if template is None:
        template = Template(lesson, isolation, demos=demos, wait=False)
        with _lock:
            _shared[key] = template
    if wait:
        template.ready()
    return template


def _take_spare(kind: tuple[str, str, bool]) -> Template | None:
    """A spare template of ``kind`` that is still running, if any (those that died are closed).
    Called holding the lock."""
    spares = _spare.get(kind, [])
    while spares:
        template = spares.pop()
        if template.alive():
            return template
        template.close()
    return None


def shared_pair(lesson: str, isolation: str, wait: bool = True) -> tuple[Template, Template | None]:
    """This thread's templates for grading ``lesson``: the verdicts' (warm, unless not ``wait``)
    and, for a lesson whose demonstrations need its own exercises' implementations
    (:func:`view.has_demos`), the demonstrations' (else None), which warms while the first
    notebook runs in the other."""
    demos = shared(lesson, isolation, demos=True, wait=False) if view.has_demos(lesson) else None
    return shared(lesson, isolation, wait=wait), demos


def warm(lesson: str, isolation: str, threads: int) -> int:
    """Start templates for grading ``lesson`` now, without waiting for them, so that ``threads``
    threads of this process find theirs warm (:func:`shared_pair`): as many pairs as are missing
    among the threads' templates and the spares. Return how many pairs were started.

    A Dask worker calls it as it joins a batch (:mod:`autograder.dask_warm`), so that its
    templates warm while the batch starts instead of at the first submission."""
    kinds = [(lesson, isolation, False)]
    if view.has_demos(lesson):
        kinds.append((lesson, isolation, True))
    with _lock:
        have = sum(k[:3] == kinds[0] and t.alive() for k, t in _shared.items())
        have += sum(t.alive() for t in _spare.get(kinds[0], []))
    missing = max(0, threads - have)
    for _ in range(missing):
        started = [(kind, Template(*kind, wait=False)) for kind in kinds]
        with _lock:
            for kind, template in started:
                _spare.setdefault(kind, []).append(template)
    return missing


def drop_spares(lesson: str, isolation: str) -> None:
    """Close the spare templates for ``lesson`` no thread has taken (a batch is over)."""
    with _lock:
        dropped = [t for k in list(_spare) if k[:2] == (lesson, isolation) for t in _spare.pop(k)]
    for template in dropped:
        template.close()


def close_shared() -> None:
    """Close this process's templates, the threads' and the spares (also at exit)."""
    with _lock:
        templates = [*_shared.values(), *(t for spares in _spare.values() for t in spares)]
        _shared.clear()
        _spare.clear()
    for template in templates:
        template.close()


atexit.register(close_shared)


def _hello(sock: socket.socket, deadline: float) -> int:
    """Read one hello; return the sender's process id as the kernel reported it."""
    if not select_ready(sock, deadline):
        raise protocol.Timeout("no hello from the sandbox in time")
    data, ancillary, _, _ = sock.recvmsg(len(protocol.HELLO), socket.CMSG_SPACE(_CREDS))
    if data == protocol.FAILED:
        with contextlib.suppress(OSError):
            data += sock.recv(4000)
        reason = data[len(protocol.FAILED) :].decode("utf-8", "replace")
        raise protocol.ProtocolError(f"setting up the sandbox failed ({reason})")
    if data != protocol.HELLO:
        raise protocol.ProtocolError("the sandbox did not say hello")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _, _ = struct.unpack("3i", payload[:_CREDS])
            return pid
    raise protocol.ProtocolError("the kernel attached no credentials to the hello")


def select_ready(sock: socket.socket, deadline: float) -> bool:
    import select

    return bool(select.select([sock], [], [], max(deadline - time.monotonic(), 0))[0])


def _before_the_template() -> None:
    """In the template's bubblewrap (or plain) process: die when the grader dies, and map small
    pages only, in it and every process it starts, so that the memory a call touches is counted
    by the 4 KiB page (:func:`attnlib.checks.memory.small_pages`)."""
    from .sandbox.confine import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    small_pages()
