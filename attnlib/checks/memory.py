"""Peak memory of one call, counting what NumPy, PyTorch and other native code allocate.

``tracemalloc`` sees every allocation Python and NumPy make, but nothing PyTorch, BLAS or any
other native library allocates for itself: a torch attention holding a 32 MiB score matrix looks
free to it. So :func:`traced_peak` reads two meters at once and keeps the larger reading:

- :class:`TracedMeter`, tracemalloc's peak above its level at the start;
- a *native* meter, the first of these the platform offers:

  1. :class:`AllocatorMeter` (glibc): the bytes the C allocator has handed out and not taken
     back (``mallinfo2``: in use on its heaps plus its mmapped blocks), sampled every
     :data:`PERIOD` seconds by a thread while the call runs. This is live memory, exactly what a
     score matrix occupies; a resident-set reading would add the allocator's slack (freed memory
     it keeps for reuse), which for a correct block-by-block torch loop is several times the
     blocks themselves. A sample can only miss a peak, never invent one: a score matrix of
     n = 4096 lives for tens of milliseconds, hundreds of periods;
  2. :class:`ResidentMeter` (Linux without glibc): the resident set's high-water mark (``VmHWM``
     in ``/proc/self/status``) above the resident set at the start, after handing the allocator's
     reserve back to the system and resetting the mark (``5`` into ``/proc/self/clear_refs``).
     It includes allocator slack, so it reads high rather than low;
  3. where ``/proc`` cannot be used either (macOS, Windows, a locked-down container): the growth
     of the process's lifetime peak (``getrusage``), which sees native memory only when the call
     outgrows everything the process held before; tracemalloc does the rest.

Memory a function took *before* the call (a buffer its cell allocated and filled) is held already,
so neither meter sees it used. On Linux a third reading counts it: :func:`touched`, the memory the
call read or wrote wherever it was taken. The kernel marks every page a process uses as
*referenced*; :class:`TouchedMeter` clears those marks of this process (``1`` into
``/proc/self/clear_refs``) as the call begins, and counts the writable or anonymous pages marked
again when it returns, memory in shared mappings whole (another process may have used it and
ended, its marks with it), and memory held as the call began and given back since (its marks
went with it). A call touches at least what it adds, so the reading is no less than the growth of
the resident set's high-water mark either: memory taken, written and given back within the call
leaves no marks. That reading is taken in a call of its own, with no meter sampling beside it:
glibc's ``mallinfo2`` reads every free block of the heaps. The grader takes the same
reading of a sandbox's processes from outside (``autograder.limits.TouchedTree``).

A mark covers one page, and a *transparent huge page* is one page of 2 MiB: where the system
backs memory with them (``always`` in ``/sys/kernel/mm/transparent_hugepage/enabled``, the
default of several distributions), one byte read anywhere in one counts 2 MiB. A right answer at
n = 2048 then read 17 to 34 MiB, as much as the naive one's score matrix. So importing this module
asks the kernel for small pages in this process from then on (:func:`small_pages`), as the
grader asks for its sandboxes before they start; arrays of many MiB are slower to fill without
huge pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import re
import sys
import tracemalloc
from collections.abc import Callable
from typing import NamedTuple

from ..measure import Sampler

PERIOD = 2e-4  # seconds between two samples of the C allocator
STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
RESET_PEAK = "5"  # clear_refs: reset the peak resident set size (VmHWM) to the current one
FORGET_TOUCHED = "1"  # clear_refs: clear the referenced mark of every page the process maps
SETTLE = 1 << 26  # bytes: more than any freed block, and than glibc's largest mmap threshold
PR_SET_THP_DISABLE = 41  # prctl(2): no transparent huge pages for this process and its children


class Used(NamedTuple):
    """What one call used, in bytes: ``held``, the most memory it held above the level before;
    ``touched``, the memory it read or wrote, taken before the call or during it (None where
    this platform cannot tell)."""

    held: int
    touched: int | None = None


def traced_peak(fn: Callable[..., object], *args, **kwargs) -> tuple[object, Used]:
    """Call ``fn`` twice; return the first call's result and what the calls used (see the
    module doc).

    ``touched`` is read in the first call (:func:`touched`), without the native meter: its
    samples walk the C allocator's heaps (``mallinfo2`` reads every free block), which in a
    kernel that has run for a while is tens or hundreds of MiB the call never used. ``held``,
    the larger of tracemalloc's reading and the native meter's, is read in the second. In that
    order a function that remembers its last answer cannot skip the touched reading: the first
    call on arguments it never saw must do the work.
    """
    result, used = _touched_call(fn, *args, **kwargs)
    native = native_meter()
    traced = TracedMeter()
    try:
        fn(*args, **kwargs)
    finally:
        python = traced.stop()
        held = native.stop()
    return result, Used(max(python, held), used)


def touched(fn: Callable[..., object], *args, **kwargs) -> int | None:
    """Bytes of memory a call of ``fn`` reads or writes, wherever it was taken (see the module
    doc); None where this platform cannot tell."""
    return _touched_call(fn, *args, **kwargs)[1]


def _touched_call(fn: Callable[..., object], *args, **kwargs) -> tuple[object, int | None]:
    """Call ``fn``; return its result and the memory it touched (None where untold). Python's
    cyclic garbage collector is held off meanwhile: a full collection walks every object the
    process holds (49 MiB touched for 300,000 small lists), which in a long session is far more
    than the call's own work."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        meter = TouchedMeter()
        result = fn(*args, **kwargs)
        return result, meter.stop()
    finally:
        if collecting:
            gc.enable()


def small_pages() -> bool:
    """Ask the kernel to back this process's memory, and its children's, with small pages only
    from now on (``PR_SET_THP_DISABLE``), so that a page's referenced mark tells 4 KiB apart, not
    2 MiB (see the module doc); False where that is impossible. Pages already huge stay so.

    Not even where a library asks for huge ones (``MADV_HUGEPAGE``; Linux 6.18 could except
    those): NumPy asks for every array of 4 MiB and more, and once glibc serves such arrays from
    its heap (after freeing a large block raised its mmap threshold) parts of the heap became
    huge, and a call that did nothing read 13 MiB. The cost: a naive attention at n = 4096 runs
    about 1.5 times slower in a process that imported the checks (291 ms against 197 here)."""
    prctl = getattr(_libc(), "prctl", None)
    return prctl is not None and prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0


def forget_touched(pid: int | str = "self") -> bool:
    """Clear the referenced mark of every page ``pid`` maps, so that :func:`writable_memory`
    then counts only the pages used since; False where that is impossible."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write(FORGET_TOUCHED)
    except OSError:
        return False
    return True


class Pages(NamedTuple):
    """Bytes of one process's writable or anonymous memory (see :func:`writable_memory`)."""

    resident: int  # in memory now
    referenced: int  # of its private part, used since the marks were last cleared
    shared: int  # in shared mappings: a process may use it and end, its marks with it

    @property
    def touched(self) -> int:
        """What a call counts as touched: the private pages marked, and shared memory whole."""
        return self.referenced + self.shared

    def gone_since(self, resident: int) -> int:
        """Bytes of the ``resident`` memory the process held earlier that it holds no more. A
        call counts them as touched: memory given back takes its marks with it, and what the
        call did with it first cannot be known (a buffer taken ahead, written and unmapped)."""
        return max(0, resident - self.resident)


def writable_memory(pid: int | str = "self") -> Pages | None:
    """``pid``'s writable or anonymous memory, from ``/proc/PID/smaps``; None where unreadable.

    Code and read-only data of files are left out: they hold no arrays, and a call runs through
    its libraries' code."""
    resident = referenced = shared = 0
    counts = sharing = False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                field, _, rest = line.partition(" ")
                if not field.endswith(":"):  # a mapping: start-end perms offset dev inode [path]
                    parts = rest.split(maxsplit=4)
                    path = parts[4].strip() if len(parts) > 4 else ""
                    counts = "w" in parts[0] or not path or path.startswith("[")
                    sharing = "w" in parts[0] and parts[0].endswith("s")
                elif counts and field == "Rss:":
                    kib = int(rest.split()[0]) * 1024
                    resident += kib
                    shared += kib if sharing else 0
                elif counts and not sharing and field == "Referenced:":
                    referenced += int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return Pages(resident, referenced, shared)


class TouchedMeter:
    """The memory this process reads or writes from now on (Linux): see the module doc.

    A call touches at least the memory it adds, which marks tell only while it is held: memory
    taken, written and given back within the call is counted by the growth of the resident set's
    high-water mark (``VmHWM``, reset as the meter starts), read without sampling anything."""

    def __init__(self) -> None:
        _settle_heap()
        self.before = writable_memory()
        self.peaks = _reset_high_water_mark()
        self.base = _status_bytes("VmRSS")
        self.able = self.before is not None and forget_touched()

    def stop(self) -> int | None:
        reading = writable_memory() if self.able else None
        if reading is None:
            return None
        added = _status_bytes("VmHWM") - self.base if self.peaks else 0
        return max(reading.touched + reading.gone_since(self.before.resident), added)


def native_meter() -> AllocatorMeter | ResidentMeter:
    """The most precise meter of native allocations this platform offers, started."""
    return AllocatorMeter() if _mallinfo2() is not None else ResidentMeter()


class TracedMeter:
    """tracemalloc's peak above the traced memory at start (shares a trace already running)."""

    def __init__(self) -> None:
        self.owner = not tracemalloc.is_tracing()
        if self.owner:
            tracemalloc.start()
        else:
            tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]

    def stop(self) -> int:
        _, peak = tracemalloc.get_traced_memory()
        if self.owner:
            tracemalloc.stop()
        return max(peak - self.base, 0)


class AllocatorMeter:
    """The C allocator's bytes in use, sampled by a thread: the largest sample above the start."""

    def __init__(self) -> None:
        self.sampler = Sampler(_allocated, PERIOD)
        self.base = self.sampler.top

    def stop(self) -> int:
        return max(self.sampler.stop() - self.base, 0)


class ResidentMeter:
    """Growth of the resident set during a call (allocator slack included)."""

    def __init__(self) -> None:
        _trim_heap()
        self.exact = _reset_high_water_mark()
        self.base = _status_bytes("VmRSS") if self.exact else _lifetime_peak()

    def stop(self) -> int:
        top = _status_bytes("VmHWM") if self.exact else _lifetime_peak()
        return max(top - self.base, 0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@functools.cache
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


@functools.cache
def _mallinfo2():
    """glibc's ``mallinfo2`` (2.33 and later), or ``None``."""
    function = getattr(_libc(), "mallinfo2", None)
    if function is not None:
        function.restype = _MallInfo2
    return function


def _allocated() -> int:
    """Bytes the C allocator has handed out: in use on its heaps plus its mmapped blocks."""
    info = _mallinfo2()()
    return info.uordblks + info.hblkhd


def _reset_high_water_mark() -> bool:
    """Reset the kernel's peak resident set to the current one; False where that is impossible."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write(RESET_PEAK)
    except OSError:
        return False
    return _status_bytes("VmHWM") > 0 and _status_bytes("VmRSS") > 0


def _status_bytes(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` in bytes (0 if unreadable)."""
    try:
        with open(STATUS) as f:
            found = re.search(rf"^{field}:\s+(\d+)\s+kB", f.read(), re.M)
    except OSError:
        return 0
    return int(found.group(1)) * 1024 if found else 0


def _lifetime_peak() -> int:
    """The process's peak resident set so far, in bytes (0 where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _settle_heap() -> None:
    """Have glibc's allocator sort the blocks freed since it last looked (its *unsorted* list) now,
    not in the next large request: the measured call's, or the reading's own. Sorting reads every
    such block: after 5,000 freed arrays that read 13 MiB the call never used."""
    libc = _libc()
    if getattr(libc, "mallinfo2", None) is None:  # not glibc
        return
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(SETTLE))


def _trim_heap() -> None:
    """Give memory the C allocator holds in reserve back to the system (glibc only), so that
    memory the call reuses counts again in the resident set."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


small_pages()  # before the arrays a lesson or a check makes
