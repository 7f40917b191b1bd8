"""What the numbers were measured on: CPU, libraries, BLAS and thread counts, load."""

from __future__ import annotations

import os
import platform
import time
from typing import Any, NamedTuple

import numpy as np


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_context() -> dict[str, Any]:
    """What a benchmark's results are written beside: the CPU's model and the kernel (this
    machine's host has changed between days), cores, Python, the load average at the start."""
    return {
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": os.getloadavg()[0],
    }


def usable_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> tuple[float, float, float] | None:
    """1, 5 and 15-minute load averages (``None`` where the OS has none)."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except OSError:
        return None


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """Everything printed at the top of a run and written next to its results."""
    import threadpoolctl
    import torch

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "threadpools": [
            {k: lib.get(k) for k in ("user_api", "internal_api", "num_threads", "version")}
            | {"library": os.path.basename(lib.get("filepath", "")), **_arch(lib)}
            for lib in threadpoolctl.threadpool_info()
        ],
        "load_average": load_average(),
        "memory_available_gib": _gib(available_memory()),
    }
    return info


def _arch(lib: dict[str, Any]) -> dict[str, Any]:
    return {"architecture": lib["architecture"]} if lib.get("architecture") else {}


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / (1 << 30), 1)


def describe(info: dict[str, Any]) -> list[str]:
    """``info`` as short human-readable lines."""
    lines = [
        f"CPU: {info['cpu']} ({info['usable_cpus']} usable of {info['cpu_count']} logical CPUs)",
        f"Platform: {info['platform']}, Python {info['python']}",
        f"NumPy {info['numpy']}; PyTorch {info['torch']} "
        f"(threads {info['torch_num_threads']}, interop {info['torch_num_interop_threads']}, "
        f"CPU capability {info['torch_cpu_capability']})",
        f"CUDA: {info['cuda'] or 'not available'}",
    ]
    for lib in info["threadpools"]:
        arch = f", {lib['architecture']}" if "architecture" in lib else ""
        lines.append(
            f"threadpool: {lib['user_api']}/{lib['internal_api']} {lib['library']} "
            f"{lib['version'] or ''} — {lib['num_threads']} threads{arch}"
        )
    load = info["load_average"]
    lines.append(f"Load average (1/5/15 min): {' / '.join(map(str, load)) if load else 'n/a'}")
    lines.append(f"Memory available: {info['memory_available_gib']} GiB")
    return lines


class OtherProcessesCpu:
    """The share of the machine's CPU time that *other* processes used during a ``with`` block.

    Reads ``/proc/stat`` (all CPUs) and ``/proc/self/stat`` (this process, all its
    threads) at entry and exit. ``share`` is ``None`` where ``/proc`` is missing.
    A share near 0 means the timings saw a quiet machine.
    """

    share: float | None = None

    def __enter__(self) -> OtherProcessesCpu:
        self._start = _cpu_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        end = _cpu_ticks()
        if self._start is None or end is None:
            return
        total, busy, mine = (b - a for a, b in zip(self._start, end, strict=True))
        self.share = max(0.0, (busy - mine) / total) if total > 0 else 0.0


class ProcessUsage(NamedTuple):
    """What the kernel has charged to one process (all its threads) since it started."""

    user_ticks: int  # clock ticks in user space (utime)
    system_ticks: int  # clock ticks in the kernel on its behalf (stime): page faults among them
    minor_faults: int  # page faults served from memory (minflt)
    major_faults: int  # page faults that read from disk (majflt)


def process_usage(pid: int | str = "self") -> ProcessUsage | None:
    """:class:`ProcessUsage` of process ``pid`` from ``/proc/PID/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    except OSError:
        return None
    # fields from the state on: minflt 7, majflt 9, utime 11, stime 12 (proc(5), from 0)
    return ProcessUsage(int(fields[11]), int(fields[12]), int(fields[7]), int(fields[9]))


def process_ticks(pid: int | str = "self") -> int | None:
    """Clock ticks of CPU (user + system, all threads) charged to process ``pid``; None if gone."""
    usage = process_usage(pid)
    return None if usage is None else usage.user_ticks + usage.system_ticks


def _cpu_ticks() -> tuple[int, int, int] | None:
    """(all ticks, busy ticks) of the machine and busy ticks of this process, or None."""
    try:
        with open("/proc/stat") as f:
            values = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    mine = process_ticks()
    if mine is None:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (not guest)
    return total, total - idle, mine


def wait_for_quiet(max_wait: float, threshold: float = 0.1, window: float = 0.5) -> float | None:
    """Wait (up to ``max_wait`` seconds) until other processes use < ``threshold`` of the CPUs.

    Returns the share measured in the last ``window``-second sample (``None`` without ``/proc``,
    or when ``max_wait`` is 0: then it returns at once).
    """
    if max_wait <= 0:
        return None
    deadline = time.monotonic() + max_wait
    while True:
        with OtherProcessesCpu() as others:
            time.sleep(window)
        if others.share is None or others.share < threshold or time.monotonic() >= deadline:
            return others.share
