"""A seccomp filter that keeps the kernel's record of the memory a call touched.

The grader measures what a learner's function works on, not only what it allocates
(:func:`attnlib.checks.memory.touched`): it clears the kernel's *referenced* bit of every page the
sandbox's processes map, runs the call, and counts the pages whose bit is set again. Memory a
function took before the call (a buffer its cell filled) counts once the function reads or writes
it. Learner code could clear those bits too, and so look as if it touched nothing:

- ``/proc/PID/clear_refs``: the sandbox's ``/proc`` is mounted read-only
  (:func:`autograder.sandbox.confine.make_root`);
- ``madvise`` with ``MADV_FREE``, ``MADV_COLD`` or ``MADV_PAGEOUT`` (each marks the pages it is
  given old), or ``MADV_COLLAPSE`` (it copies them into a fresh huge page): refused here with
  ``EINVAL``, as a kernel older than each advice refuses it, so an allocator that tries one goes
  on without it;
- ``process_madvise`` (the same advice for any process), and ``mbind``, ``migrate_pages`` and
  ``move_pages`` (a page moved to another NUMA node may come back old): refused with ``ENOSYS``,
  as a kernel built without them does.

Only the native system-call interface is allowed past the filter: a call through another one
(``int 0x80``'s 32-bit calls on x86-64, x32, 32-bit Arm on arm64) fails with ``ENOSYS``, so none
reaches ``madvise`` by another number. The advice is an ``int``, and the filter compares the low
32 bits of its register, which is what the kernel reads (libseccomp, which builds filters,
compares all 64, so an advice with a high bit set would pass its rule): the filter is the kernel's
classic BPF, a dozen instructions, written here (:func:`program`).

Installed by :func:`install` in the executor before any learner code; the kernel keeps it for the
life of the process and of every process it starts, across ``execve``, and none can remove it.
The trusted side checks from outside that it is there (``Seccomp_filters`` in
``/proc/PID/status``, :func:`autograder.limits.filters`) before it trusts a count of touched
memory.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian)
NR, ARCH = 0, 4
ARG2_LOW = 16 + 2 * 8

# classic BPF opcodes
LD_W_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
ALLOW = 0x7FFF0000

# madvise advice that marks pages old or moves them (include/uapi/asm-generic/mman-common.h)
MADV_FREE, MADV_COLD, MADV_PAGEOUT, MADV_COLLAPSE = 8, 20, 21, 25
REFUSED_ADVICE = (MADV_FREE, MADV_COLD, MADV_PAGEOUT, MADV_COLLAPSE)


def _errno(number: int) -> int:
    return 0x00050000 | number  # SECCOMP_RET_ERRNO


# The native interface of each machine the course runs on: its audit architecture, the number of
# madvise, and the numbers of the calls refused outright (process_madvise, mbind, migrate_pages,
# move_pages). x32's calls are x86-64's with X32_BIT set.
NATIVE = {
    "x86_64": (0xC000003E, 28, (440, 237, 256, 279)),
    "aarch64": (0xC00000B7, 233, (440, 235, 238, 239)),
}
X32_BIT = 0x40000000


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (``platform.machine()``), as the kernel's ``sock_filter``
    array; None for a machine not in :data:`NATIVE`."""
    native = NATIVE.get(machine or platform.machine())
    if native is None:
        return None
    arch, madvise, refused = native
    # (label, opcode, operand, label if true, label if false); a jump goes forward only
    code = [
        ("arch", LD_W_ABS, ARCH, None, None),
        (None, JEQ, arch, "nr", "nosys"),
        ("nr", LD_W_ABS, NR, None, None),
        (None, JGE, X32_BIT, "nosys", "madvise"),
        ("madvise", JEQ, madvise, "advice", f"refused-{refused[0]}"),
    ]
    for i, number in enumerate(refused):
        after = f"refused-{refused[i + 1]}" if i + 1 < len(refused) else "allow"
        code.append((f"refused-{number}", JEQ, number, "nosys", after))
    code.append(("allow", RET, ALLOW, None, None))
    code.append(("advice", LD_W_ABS, ARG2_LOW, None, None))  # an int: the low 32 bits
    for i, advice in enumerate(REFUSED_ADVICE):
        after = f"advice-{i + 1}" if i + 1 < len(REFUSED_ADVICE) else "allow-advice"
        code.append((f"advice-{i}" if i else None, JEQ, advice, "inval", after))
    code += [
        ("allow-advice", RET, ALLOW, None, None),
        ("inval", RET, _errno(errno.EINVAL), None, None),
        ("nosys", RET, _errno(errno.ENOSYS), None, None),
    ]
    at = {label: pc for pc, (label, *_) in enumerate(code) if label}
    out = b""
    for pc, (_, op, k, yes, no) in enumerate(code):
        jt = at[yes] - pc - 1 if yes else 0
        jf = at[no] - pc - 1 if no else 0
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError(f"instruction {pc}: a jump goes backwards or too far")
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> bool:
    """Keep the kernel's record of touched memory for good (see the module doc): set
    ``no_new_privs`` (a filter needs it without privileges) and load the filter. False where
    this machine has none, or its kernel took none (the trusted side then trusts no count)."""
    code = program()
    if code is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0) != 0:
        return False
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _Fprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    mode = ctypes.c_ulong(SECCOMP_MODE_FILTER)
    return libc.prctl(PR_SET_SECCOMP, mode, ctypes.byref(prog), 0, 0) == 0
