"""Run learner code in a disposable, limited, unprivileged process.

:func:`start` forks twice from a warm worker (which has imported NumPy, PyTorch, attnlib and
IPython once): an *intermediate* process whose only job is to be the learner's parent, and under
it the *sandbox* process that runs the learner's code. Before any learner code runs, the sandbox

* starts a new session (so ``kill(0, …)`` reaches only its own process group),
* closes every inherited file descriptor except its socket to the grader (no gradebook handle,
  no pipe to the worker pool survives),
* sets resource limits: address space (``--memory``), CPU time, open files, file size, no core
  dumps and, when it has its own user, a process count,
* moves into a private temporary directory (its ``HOME``, ``TMPDIR`` and working directory),
* when the grader runs as root, drops to an unprivileged user id of its own (``setgroups([])``,
  ``setgid``, ``setuid``) with ``PR_SET_NO_NEW_PRIVS`` set, so the course's files (gradebook,
  other students' submissions, autograded notebooks), owned by root and not writable by others,
  cannot be changed, and no process of the grader can be signalled.

Killing "its parent" kills only the intermediate process; the grader talks to the sandbox over a
socket and notices its death as end-of-file. See docs/grading.md for what holds where.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import wire

SANDBOX_UID_BASE = 61000  # uid (and gid) base + slot; no account needed for a uid
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38


@dataclass
class Limits:
    """What one submission may use."""

    timeout: float = 30.0  # wall seconds per cell (and per check call)
    memory_mb: int = 2048  # address space beyond what the warm worker already maps
    cpu_seconds: int = 600  # CPU time of the sandbox process in all
    max_output: int = 2 * 2**20  # bytes of outputs kept for the whole notebook
    restarts: int = 8  # fresh processes after a crash, per submission


@dataclass
class Sandbox:
    """A running sandbox process and its socket."""

    sock: socket.socket
    pid: int  # the sandbox process (not our child: the intermediate's)
    intermediate: int
    workdir: str
    uid: int | None
    env: dict = field(default_factory=dict)

    def send(self, header: dict, buffers: list[bytes] = ()) -> None:
        wire.send(self.sock, header, buffers)

    def recv(self, timeout: float | None) -> tuple[dict, list[bytes]]:
        return wire.recv(self.sock, timeout)

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGINT)

    def close(self) -> None:
        """Kill the sandbox and everything it started; remove its directory."""
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        if self.uid is not None:
            kill_all_of(self.uid)
        with contextlib.suppress(OSError):
            os.kill(self.intermediate, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.intermediate, 0)
        shutil.rmtree(self.workdir, ignore_errors=True)


def can_drop_privileges() -> bool:
    return hasattr(os, "setuid") and os.geteuid() == 0


def kill_all_of(uid: int) -> None:
    """SIGKILL every process of ``uid`` (a sandbox user): fork, become it, ``kill(-1)``."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (worker pools)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def start(
    target: Callable[[socket.socket], None],
    limits: Limits,
    *,
    uid: int | None = None,
    files: dict[str, bytes] | None = None,
    env: dict[str, str] | None = None,
) -> Sandbox:
    """Fork the intermediate and the sandbox; run ``target(sock)`` in the sandbox."""
    workdir = tempfile.mkdtemp(prefix="attn-grade-")
    for name, data in (files or {}).items():
        path = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if uid is not None:
        for dirpath, dirnames, filenames in os.walk(workdir):
            for name in [*dirnames, *filenames]:
                os.chown(os.path.join(dirpath, name), uid, uid)
        os.chown(workdir, uid, uid)
    os.chmod(workdir, 0o700)
    ours, theirs = socket.socketpair()
    intermediate = os.fork()
    if intermediate == 0:  # ---- the intermediate: the learner's parent, and nothing else
        try:
            ours.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            child = os.fork()
            if child == 0:
                _become_sandbox(theirs, target, limits, uid, workdir, env or {})
            theirs.close()
            while True:
                try:
                    os.waitpid(child, 0)
                    break
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
        finally:
            os._exit(0)
    theirs.close()
    box = Sandbox(ours, pid=-1, intermediate=intermediate, workdir=workdir, uid=uid)
    try:
        hello, _ = box.recv(timeout=60)
        box.pid = int(hello["pid"])
    except (wire.WireError, KeyError, TypeError, ValueError):
        box.close()
        raise
    return box


def _become_sandbox(sock, target, limits: Limits, uid, workdir, env) -> None:
    status = 1
    try:
        os.setsid()
        fd = sock.fileno()
        devnull = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(devnull, std)
        os.closerange(3, fd)
        os.closerange(fd + 1, 1 << 16)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        _limit(resource.RLIMIT_AS, _vm_bytes() + limits.memory_mb * 2**20)
        _limit(resource.RLIMIT_CPU, int(limits.cpu_seconds), int(limits.cpu_seconds) + 5)
        _limit(resource.RLIMIT_CORE, 0)
        _limit(resource.RLIMIT_FSIZE, 256 * 2**20)
        _limit(resource.RLIMIT_NOFILE, 256)
        os.chdir(workdir)
        os.environ.update({"HOME": workdir, "TMPDIR": workdir, "MPLCONFIGDIR": workdir, **env})
        tempfile.tempdir = workdir
        if uid is not None:
            _limit(resource.RLIMIT_NPROC, 512)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.environ["USER"] = os.environ["LOGNAME"] = "attn-grade-sandbox"
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        wire.send(sock, {"ev": "hello", "pid": os.getpid()})
        target(sock)
        status = 0
    except BaseException:  # noqa: BLE001 — the sandbox must never return into the worker
        status = 1
    finally:
        os._exit(status)


def _limit(which: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    with contextlib.suppress(ValueError, OSError):
        old_soft, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))


def wait_quietly(box: Sandbox, seconds: float) -> None:
    """Give a sandbox a moment to finish on its own."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(box.pid, 0)
        except OSError:
            return
        time.sleep(0.02)
