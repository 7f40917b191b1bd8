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
     n = 2048 lives for milliseconds, dozens of periods;
  2. :class:`ResidentMeter` (Linux without glibc): the resident set's high-water mark (``VmHWM``
     in ``/proc/self/status``) above the resident set at the start, after handing the allocator's
     reserve back to the system and resetting the mark (``5`` into ``/proc/self/clear_refs``).
     It includes allocator slack, so it reads high rather than low;
  3. where ``/proc`` cannot be used either (macOS, Windows, a locked-down container): the growth
     of the process's lifetime peak (``getrusage``), which sees native memory only when the call
     outgrows everything the process held before; tracemalloc does the rest.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
import sys
import threading
import tracemalloc
from collections.abc import Callable

PERIOD = 2e-4  # seconds between two samples of the C allocator
STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
RESET_PEAK = "5"  # clear_refs: reset the peak resident set size (VmHWM) to the current one


def traced_peak(fn: Callable[..., object], *args, **kwargs) -> tuple[object, int]:
    """Call ``fn``; return its result and the most memory (bytes) it held above the level before.

    The larger of tracemalloc's reading and the native meter's (see the module doc).
    """
    native = native_meter()
    traced = TracedMeter()
    try:
        result = fn(*args, **kwargs)
    finally:
        python = traced.stop()
        held = native.stop()
    return result, max(python, held)


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
        self.base = self.top = _allocated()
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="attnlib-memory", daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        while not self.done.wait(PERIOD):
            self.top = max(self.top, _allocated())

    def stop(self) -> int:
        self.done.set()
        self.watcher.join()
        self.top = max(self.top, _allocated())
        return max(self.top - self.base, 0)


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


def _trim_heap() -> None:
    """Give memory the C allocator holds in reserve back to the system (glibc only), so that
    memory the call reuses counts again in the resident set."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)
