"""What one submission may use, enforced from the trusted side.

:class:`Limits` holds the numbers. The sandbox sets per-process resource limits on itself before
any learner code runs (:mod:`autograder.sandbox.confine`), but a limit the learner's process can
reach is no limit, so the whole sandbox is also bounded from outside:

* **memory and processes** by a cgroup of its own (:class:`Cgroup`, v1 or v2) when the machine
  offers one we may write (as root, usually) — the kernel counts every process of the sandbox,
  its page cache and its ``/tmp``;
* **its share of the processors** by the same cgroup's CPU quota, where the machine has the CPU
  controller: however many processes a sandbox runs, together they get at most ``cpus`` cores,
  so one sandbox cannot slow the students graded beside it past their (wall-clock) budgets;
* otherwise by a watchdog (:func:`tree_memory`): while the trusted side waits for a reply it sums
  the memory of every process in the sandbox's process tree (a PID namespace, so no process
  escapes the tree; shared pages counted once) and kills the sandbox past the limit; the process
  count is then the sandbox's ``RLIMIT_NPROC``, which the kernel counts per user namespace;
* **time** by the deadlines of :mod:`autograder.runner`: per cell and per call, and per notebook.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnlib.checks.memory import forget_touched, writable_memory


@dataclass(frozen=True)
class Limits:
    """What one submission may use."""

    timeout: float = 30.0  # wall seconds per cell, and per call of the learner's code
    budget: float = 300.0  # wall seconds for the whole notebook, its checks included
    memory_mb: int = 2048  # resident memory of the whole sandbox
    cpu_seconds: int = 600  # CPU time of each sandbox process
    processes: int = 64  # processes and threads of the whole sandbox
    cpus: float = 1.0  # cores the whole sandbox may use at once (where a cgroup can cap it; 0: all)
    tmp_mb: int = 64  # the sandbox's private /tmp
    max_output: int = 2 * 2**20  # bytes of outputs kept for the whole notebook
    restarts: int = 8  # fresh sandboxes after a crash, per notebook
    # Problems of this grading's own, beside the checks' public ones (attnlib.checks.Secret): how
    # many per exercise (0: none), and the seed they are drawn from. Neither goes to
    # the sandbox.
    secret_problems: int = 0
    secret_seed: int = 0

    def for_sandbox(self) -> dict:
        """The part the sandbox applies to itself (the ``go`` message)."""
        return {
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "processes": self.processes,
            "tmp_mb": self.tmp_mb,
        }


# ---------------------------------------------------------------------------------------------
# cgroups


CGROUP_ROOT = Path("/sys/fs/cgroup")


CPU_PERIOD_US = 100_000  # the period of a cgroup's CPU quota (the kernel's default)

# A sandbox's cgroup is named for the grader that made it: attn-grade-<grader's pid>-<serial>.
_OURS = re.compile(r"attn-grade-(?:probe-)?(\d+)(?:-\d+)?")
STALE_AFTER = 60.0  # seconds; a grader moves a sandbox into its new cgroup in milliseconds
_swept: set[Path] = set()  # the folders this process has swept


class Cgroup:
    """A cgroup (v1: memory + pids controllers, and cpu where mounted; v2: unified) holding one
    sandbox.

    Created under the grader's own cgroup, so it also stays inside any limit the grader has.
    :attr:`cpu_capped` says whether the CPU quota is in force (the CPU controller is optional).
    """

    def __init__(self, dirs: dict[str, Path], v2: bool):
        self.dirs, self.v2 = dirs, v2
        self.cpu_capped = False

    @classmethod
    def create(
        cls, name: str, memory_bytes: int, processes: int, cpus: float | None = None
    ) -> Cgroup | None:
        """A new cgroup with these limits, or None when the machine does not let us make one.

        ``cpus`` cores at most for all its processes together, where the CPU controller lets us
        (0 or None: no quota).
        """
        own = _own_cgroups()
        if "" in own:
            places = {"": CGROUP_ROOT / own[""].lstrip("/") / name}
        elif "memory" in own and "pids" in own:
            places = {c: CGROUP_ROOT / c / own[c].lstrip("/") / name for c in ("memory", "pids")}
        else:
            return None
        for path in places.values():
            _sweep(path.parent)
        group = cls({}, v2="" in places)
        try:
            for controller, path in places.items():
                path.mkdir()
                group.dirs[controller] = path
            if group.v2:
                group._write("", "memory.max", memory_bytes)
                group._write("", "memory.swap.max", 0, optional=True)
            else:
                group._write("memory", "memory.limit_in_bytes", memory_bytes)
                group._write("memory", "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
            group._write("pids", "pids.max", processes)
        except OSError:
            group.remove()
            return None
        if cpus:
            group._cap_cpu(own, name, cpus)
        elif not group.v2:  # no quota, but the kernel still counts what every process used
            group._count_cpu(own, name)
        return group

    def _cap_cpu(self, own: dict[str, str], name: str, cpus: float) -> None:
        """Give the group a CPU quota of ``cpus`` cores, if the CPU controller is ours to use."""
        quota = max(1000, round(cpus * CPU_PERIOD_US))  # the kernel's least quota is 1 ms
        if self.v2:
            self.cpu_capped = self._write("", "cpu.max", f"{quota} {CPU_PERIOD_US}", optional=True)
            return
        if self._join(own, "cpu", name):
            self.cpu_capped = self._write(
                "cpu", "cpu.cfs_period_us", CPU_PERIOD_US, optional=True
            ) and self._write("cpu", "cpu.cfs_quota_us", quota, optional=True)
        self._count_cpu(own, name)

    def _count_cpu(self, own: dict[str, str], name: str) -> None:
        """v1: the cpuacct controller, which counts the CPU the group used (see :meth:`used`):
        ``cpuacct.usage`` in the cpu hierarchy's group where the two are mounted together, a
        group of its own where cpuacct is mounted apart. (v2 counts in every group.)"""
        if "cpu" in self.dirs and (self.dirs["cpu"] / "cpuacct.usage").exists():
            return
        self._join(own, "cpuacct", name)

    def _join(self, own: dict[str, str], controller: str, name: str) -> bool:
        """Make the group's folder in a v1 ``controller``'s hierarchy, under the grader's own."""
        if controller not in own:
            return False
        path = CGROUP_ROOT / controller / own[controller].lstrip("/") / name
        _sweep(path.parent)
        try:
            path.mkdir()
        except OSError:
            return False
        self.dirs[controller] = path
        return True

    def _file(self, controller: str, name: str) -> Path:
        return self.dirs["" if self.v2 else controller] / name

    def _write(self, controller: str, name: str, value: object, optional: bool = False) -> bool:
        """Write one setting; False if an ``optional`` one could not be written."""
        try:
            self._file(controller, name).write_text(str(value))
        except OSError:
            if not optional:
                raise
            return False
        return True

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so everything it starts later) into this cgroup."""
        for controller in self.dirs:
            self._write(controller, "cgroup.procs", pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return sorted(found)

    def memory(self) -> int:
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int(self._file("memory", name).read_text())
        return 0

    def shared(self) -> int | None:
        """Bytes of shared memory (tmpfs files, shared mappings) charged to the group now."""
        with contextlib.suppress(OSError, ValueError):
            for line in self._file("memory", "memory.stat").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "shmem":
                    return int(value)
        return None

    def reset_peak(self) -> None:
        if not self.v2:
            self._write("memory", "memory.max_usage_in_bytes", 0, optional=True)

    def peak(self) -> int:
        """The most memory the sandbox held since :meth:`reset_peak` (v2: since it began)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int(self._file("memory", name).read_text())
        return self.memory()

    def throttled(self) -> int:
        """Nanoseconds its processes were held back by the group's own CPU quota (0 with none)."""
        if not self.cpu_capped:
            return 0
        if self.v2:
            return self._cpu_stat("throttled_usec") * 1000
        return self._cpu_stat("throttled_time")

    def used(self) -> int | None:
        """Nanoseconds of CPU all its processes have used; None where no controller counts it."""
        if self.v2:
            usec = self._cpu_stat("usage_usec", None)
            return None if usec is None else usec * 1000
        for controller in ("cpuacct", "cpu"):
            if controller in self.dirs:
                with contextlib.suppress(OSError, ValueError):
                    return int(self._file(controller, "cpuacct.usage").read_text())
        return None

    def _cpu_stat(self, key: str, missing: int | None = 0) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            for line in self._file("cpu", "cpu.stat").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        return missing

    def out_of_memory(self) -> bool:
        """Did the kernel stop the sandbox at its memory limit?"""
        name = "memory.events" if self.v2 else "memory.failcnt"
        with contextlib.suppress(OSError, ValueError):
            text = self._file("memory", name).read_text()
            if self.v2:
                counts = dict(line.split() for line in text.splitlines() if line.strip())
                return int(counts.get("oom_kill", 0)) > 0
            return int(text) > 0
        return False

    def remove(self, seconds: float = 5.0) -> None:
        """Kill whatever is left in the cgroup and remove it."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if not pids:
                break
            time.sleep(0.01)
        for path in self.dirs.values():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # the last processes are still being torn down
                    time.sleep(0.02)


def _sweep(parent: Path) -> None:
    """Remove the cgroups that dead graders left in ``parent`` (once per process and folder).

    A grader killed with ``kill -9`` cannot remove its sandboxes' cgroups; their processes die
    with it, the empty folders stay. One is removed when the grader it is named for is gone and
    it is older than :data:`STALE_AFTER` (so a grader this process cannot see, in another PID
    namespace, keeps the one it is filling). The kernel removes only an empty cgroup, so a sandbox
    still running keeps its own whatever the name says.
    """
    if parent in _swept:
        return
    _swept.add(parent)
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            found = _OURS.fullmatch(path.name)
            if found is None or alive(int(found[1])):
                continue
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > STALE_AFTER:
                    path.rmdir()


def _own_cgroups() -> dict[str, str]:
    """The grader's own cgroup per controller (``""`` for v2), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(","):
                out[controller] = path
    if "" in out and not (CGROUP_ROOT / "cgroup.controllers").exists():
        del out[""]  # a v2 line beside v1 hierarchies: not ours to use
    return out


# ---------------------------------------------------------------------------------------------
# the watchdog's view of a process tree


def tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc/PID/task/TID/children)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(p) for p in f.read().split())
    return found


class TouchedTree:
    """The memory a sandbox's processes read or write from now on, counted from outside
    (:func:`attnlib.checks.memory.writable_memory`): each process's referenced marks are cleared
    now; :meth:`stop` counts then, in every process of the tree, the private pages marked again,
    shared memory whole, and the memory it holds now and will have given back (its marks go with
    it). A process of the tree now that has ended by then counts with all the
    writable memory it holds now: what it did before it ended cannot be known. So does shared
    memory no process maps (files in the sandbox's own ``/tmp`` and ``/dev/shm``, or all of the
    sandbox's shared memory where its cgroup counts it): a process may have used it and ended.
    Where a process's marks cannot be cleared (one that made itself undumpable, graded as a
    normal user), all its marked pages count."""

    def __init__(self, root: int, cgroup: Cgroup | None = None):
        self.root, self.cgroup = root, cgroup
        self.resident: dict[int, int] = {}
        for pid in tree(root):
            reading = writable_memory(pid)
            self.resident[pid] = reading.resident if reading is not None else 0
            forget_touched(pid)

    def stop(self) -> int:
        """Bytes touched since the start (see the class doc)."""
        total, now, mapped = 0, set(), 0
        for pid in tree(self.root):
            reading = writable_memory(pid)
            if reading is not None:
                now.add(pid)
                total += reading.referenced + reading.gone_since(self.resident.get(pid, 0))
                mapped += reading.shared
        ended = sum(held for pid, held in self.resident.items() if pid not in now)
        shared = self.cgroup.shared() if self.cgroup is not None else None
        if shared is None:  # no cgroup: what the processes map, and the sandbox's own tmpfs
            shared = mapped + sum(_tmpfs_used(f"/proc/{self.root}/root{d}") for d in TMPFS)
        return total + ended + max(shared, mapped)


TMPFS = ("/tmp", "/dev/shm")  # the sandbox's own, size-capped (autograder.sandbox.confine)


def _tmpfs_used(path: str) -> int:
    """Bytes in use on the filesystem at ``path`` (0 where unreadable)."""
    with contextlib.suppress(OSError):
        st = os.statvfs(path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize
    return 0


def filters(pid: int) -> int:
    """How many seccomp filters ``pid`` runs under (``Seccomp_filters`` in /proc/PID/status;
    0 where unknown)."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split()[1])
    return 0


def tree_cpu(root: int) -> int | None:
    """Nanoseconds of CPU ``root`` and all its descendants have used, every thread, with what
    the children each has waited for used before it ended (``cutime``, ``cstime``): a sandbox's,
    where no cgroup counts it. A process of the sandbox that ends is waited for by its parent or,
    orphaned, by the PID namespace's init (without a namespace, the sandbox's first process, a
    subreaper), both in the tree, so its time stays counted; unless its parent ignores
    ``SIGCHLD``: the kernel then frees it and adds its time to no one's. None if ``root`` is
    gone."""
    tick = 10**9 // os.sysconf("SC_CLK_TCK")
    total, seen = 0, False
    for pid in tree(root):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command (spaces and all)
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime (proc(5))
            seen = True
    return total * tick if seen else None


def tree_memory(root: int, precise_above: int | None = None) -> tuple[int, int]:
    """Bytes of memory and the process count of the tree under ``root``.

    The sum of resident sets counts a page shared by several processes once for each (a forked
    child shares most of its parent): cheap, and an upper bound. When that sum is above
    ``precise_above``, the proportional set sizes (``Pss``, each shared page split between its
    sharers) are summed instead — what the tree really holds, at a few milliseconds a process.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    pids = tree(root)
    total = count = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
            count += 1
    if precise_above is None or total <= precise_above:
        return total, count
    return sum(_proportional(pid) for pid in pids), count


def _proportional(pid: int) -> int:
    """The proportional set size of ``pid`` in bytes (0 if it is gone)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def headroom(extra: int) -> Iterator[None]:
    """While it lasts, this process may map at most ``extra`` bytes more than it maps now: its
    address-space limit (``RLIMIT_AS``) is lowered, then put back. A trusted function run on a
    learner's arguments then fails with ``MemoryError`` where it would take the machine's
    memory. The limit is the process's: other threads are held to the same room, and threads
    inside at once share the first one's (a Dask worker may grade in several)."""
    with _room_lock:
        if _room["inside"] == 0:
            _room["saved"] = soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            cap = _mapped() + extra
            if extra < cap and (soft == resource.RLIM_INFINITY or soft > cap):  # else held
                resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        _room["inside"] += 1
    try:
        yield
    finally:
        with _room_lock:
            _room["inside"] -= 1
            if _room["inside"] == 0:
                resource.setrlimit(resource.RLIMIT_AS, _room["saved"])


def _mapped() -> int:
    """Bytes this process maps now (0 where /proc cannot say)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return 0


_room_lock = threading.Lock()
_room = {"inside": 0, "saved": None}  # threads inside headroom(); the limit they found


def run_delay(pid: int) -> int | None:
    """Nanoseconds ``pid``'s main thread has waited, ready to run, for a processor (from
    /proc/PID/schedstat; a CPU quota that held it back counts too); None if unknown."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1])
    return None


@dataclass(frozen=True)
class Scheduling:
    """How the kernel schedules one thread: the processors it may run on, its nice value and its
    policy (``os.SCHED_OTHER``, ``SCHED_BATCH``, ``SCHED_IDLE``, …)."""

    cpus: frozenset[int]
    nice: int
    policy: int

    def given_away(self, before: Scheduling, allowed: frozenset[int] | None = None) -> str | None:
        """What the thread chose since ``before`` that keeps it waiting while others run, said
        for the grade; None if nothing. A thread may pin itself to fewer processors, raise its
        nice value or ask for idle time only, but not undo the last two (that takes
        ``CAP_SYS_NICE`` in the host's namespace, or an ``RLIMIT_NICE`` a sandbox does not get).

        ``allowed``: the processors the grader may use now. A host that takes processors from
        the grader (a cpuset made smaller) takes them from its sandboxes too: no pin of theirs."""
        if self.cpus < (before.cpus if allowed is None else before.cpus & allowed):
            shown = ", ".join(map(str, sorted(self.cpus)))
            which = "processor" if len(self.cpus) == 1 else "processors"
            return f"pinned itself to {which} {shown} of {len(before.cpus)}"
        if self.policy != before.policy and self.policy in _IDLE_POLICIES:
            return f"lowered its own priority to {_IDLE_POLICIES[self.policy]}"
        if self.nice > before.nice:
            return f"lowered its own priority (nice {before.nice} to {self.nice})"
        return None


# policies that run a thread when no other wants the processor, or run it less eagerly
_IDLE_POLICIES = {os.SCHED_IDLE: "idle time only (SCHED_IDLE)",
                  os.SCHED_BATCH: "batch time (SCHED_BATCH)"}  # fmt: skip


def scheduling(pid: int) -> Scheduling | None:
    """How ``pid``'s main thread is scheduled now (read from outside it); None if it is gone."""
    with contextlib.suppress(OSError):
        return Scheduling(
            frozenset(os.sched_getaffinity(pid)),
            os.getpriority(os.PRIO_PROCESS, pid),
            os.sched_getscheduler(pid),
        )
    return None


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_tree(root: int, within: float = 5.0) -> list[int]:
    """Kill ``root`` and every descendant, leaving none to be adopted outside the tree; return
    the pids killed. ``root`` is stopped first, so it neither ends nor reaps while the others
    are killed, and what they leave orphaned comes to it (a PID namespace's init, or a
    subreaper, is below or at ``root``) for the next walk of the tree to find; ``root`` is
    killed once the rest are dead (zombies it holds, freed with it), or after ``within``
    seconds."""
    with contextlib.suppress(OSError):
        os.kill(root, signal.SIGSTOP)
    killed, end = {root}, time.monotonic() + within
    while time.monotonic() < end:
        living = [pid for pid in tree(root) if pid != root and alive(pid)]
        if not living:
            break
        for pid in living:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.001)
    with contextlib.suppress(OSError):
        os.kill(root, signal.SIGKILL)
    return sorted(killed)


def can_cap_cpu() -> bool:
    """Can this process give a sandbox a cgroup with a CPU quota (as root, usually)?"""
    group = Cgroup.create(f"attn-grade-probe-{os.getpid()}", 64 * 2**20, 8, cpus=1.0)
    if group is None:
        return False
    try:
        return group.cpu_capped
    finally:
        group.remove()
