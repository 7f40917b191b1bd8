"""Confine one submission: fresh namespaces, a private /tmp, limits, no capabilities.

Runs in the template's freshly forked child, before any learner code, in three processes:

* the *child* becomes the user id its grader asked for, holding no capability (:func:`become`,
  from a template several graders share), and unshares a new user, mount, network, IPC, UTS and
  PID namespace (:func:`enter_namespaces`) — everything it starts lives in them, and only there;
* the *init* (pid 1 of the new PID namespace, :func:`make_root`) mounts the submission's own
  ``/proc`` (read-only, showing only its own processes), a size-capped ``/tmp`` and
  ``/dev/shm``, names the host ``sandbox`` and forbids further user namespaces; it then only
  reaps orphans, and when it dies the kernel kills every process of the namespace;
* the *executor* (:func:`drop_privileges`) sets resource limits, drops every capability (effective,
  permitted, inheritable, ambient and bounding sets), sets ``no_new_privs`` and asks to die with
  its parent, and loads a seccomp filter (:mod:`autograder.sandbox.syscalls`). Then it runs the
  learner's cells.

The template itself was started by bubblewrap with a read-only view of exactly what the code
needs (:mod:`autograder.view`); these steps give each submission its own namespaces inside that
view, so nothing one student leaves behind — files, processes, sockets — is seen by the next.
Every step uses the kernel's own interfaces (``unshare(2)``, ``mount(2)``, ``capset(2)``,
``prctl(2)``, ``setrlimit(2)``) through ``ctypes``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import socket

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
O_PATH = getattr(os, "O_PATH", 0o10000000)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    """A confinement step failed; the submission must not run."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfineError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (set after the last change of credentials)."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before we asked
        os._exit(1)


def no_dumps() -> None:
    """Make this process's memory unreadable to other processes of the same user."""
    prctl(PR_SET_DUMPABLE, 0)


# ---------------------------------------------------------------------------------------------
# the child


def become(uid: int) -> None:
    """Run as ``uid`` (its own group too, no supplementary groups) and hold no capability.

    A template that serves several graders at once runs as a user id of its own with only
    ``CAP_SETUID`` and ``CAP_SETGID`` (:func:`autograder.view.command`); each child becomes the
    user id its grader claimed. Between two ids other than root the kernel keeps capabilities, so
    they are dropped here, before anything else happens in the child.
    """
    if (os.getuid(), os.geteuid()) != (uid, uid):
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    drop_capabilities()
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or capabilities():
        raise ConfineError(0, f"could not become user {uid} without capabilities")


def enter_namespaces() -> None:
    """New user, mount, network, IPC, UTS and PID namespaces; keep the same user and group ids.

    The PID namespace takes effect for the next process forked: :func:`make_root` runs there.
    """
    uid, gid = os.getuid(), os.getgid()
    prctl(PR_SET_DUMPABLE, 1)  # the template is not; our own /proc files must be ours to write
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    _check(_libc.unshare(flags), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


# ---------------------------------------------------------------------------------------------
# the init


def make_root(
    tmp_mb: int, keep: tuple[str, ...] = (), shm_mb: int = 16, inodes: int = 4096
) -> None:
    """The submission's own /proc, /tmp and /dev/shm; no further user namespaces.

    ``keep`` are folders and links of the view under ``/tmp`` (a Python environment in a clone
    made with ``mktemp -d``, say, or a link the interpreter is reached through) that the fresh
    ``/tmp`` must not hide: each folder is bound again, read-only, at the same place inside it,
    and each link made again.
    """
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    links = {path: os.readlink(path) for path in keep if os.path.islink(path)}
    held = [(path, os.open(path, O_PATH | os.O_DIRECTORY)) for path in keep if path not in links]
    _mount("proc", "/proc", "proc", PROC_FLAGS, None)
    options = f"size={tmp_mb}m,nr_inodes={inodes},mode=1777"
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path, fd in held:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
        _mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        os.close(fd)
    for path, target in links.items():
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        os.symlink(target, path)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_mb}m,mode=1777")
    host = b"sandbox"
    _check(_libc.sethostname(host, len(host)), "sethostname")
    # Learner code could otherwise make a user namespace of its own and get capabilities there.
    _write("/proc/sys/user/max_user_namespaces", "0")
    # Nothing after this writes to /proc: learner code could otherwise clear the kernel's marks
    # of the memory it touched (/proc/PID/clear_refs), which the grader counts from outside.
    _mount("none", "/proc", None, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, None)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {target}",
    )


def reap_until(pid: int) -> int:
    """As pid 1 (or a subreaper): reap every orphan until ``pid`` exits; return its exit
    status. What each used is added to this process's count of its ended children."""
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if done == pid:
            return os.waitstatus_to_exitcode(status)


# ---------------------------------------------------------------------------------------------
# the executor


def mapped_bytes() -> int:
    """The address space this process maps now (the template's imports: PyTorch maps a lot)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def set_limits(
    memory_bytes: int, cpu_seconds: int, processes: int | None, file_bytes: int = 64 * 2**20
) -> None:
    """Resource limits of the executor and everything it starts.

    ``memory_bytes`` caps the address space of each process (the whole sandbox is capped by a
    cgroup or the trusted side's watchdog); ``processes`` counts the processes of this user in
    this user namespace (None: no limit, when there is no namespace of its own).
    """
    _limit(resource.RLIMIT_AS, memory_bytes)
    _limit(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, file_bytes)
    _limit(resource.RLIMIT_NOFILE, 256)
    if processes is not None:
        _limit(resource.RLIMIT_NPROC, processes)


def _limit(which: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    old_soft, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, old_hard), min(hard, old_hard)
    resource.setrlimit(which, (soft, hard))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """Empty every capability set, then forbid gaining privileges through execve."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        with contextlib.suppress(ConfineError):  # not in the bounding set already
            prctl(PR_CAPBSET_DROP, cap)
    with contextlib.suppress(ConfineError):
        _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient")
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def capabilities() -> int:
    """The effective capability set of this process (0 once confined)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return -1


def isolate_fds(keep: socket.socket) -> None:
    """Close every inherited file descriptor except ``keep``; stdin/out/err become /dev/null."""
    fd = keep.fileno()
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    if devnull > 2:
        os.close(devnull)
    os.closerange(3, fd)
    os.closerange(fd + 1, 1 << 16)
