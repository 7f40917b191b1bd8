"""A naive attention that writes its score matrix into memory it took before the call: lesson
05's memory check counts the memory a call touches, not only what it adds.

``chunked_attention``'s check measures what the answer uses while it runs on n = 4096 queries and
keys (``attnlib.checks.lesson05.chunked_memory``). A naive attention holds the whole (n, n) matrix
of scores. The same naive attention can fill a buffer of that size that its cell allocated and
touched when it ran, before any measurement, and hold nothing more during the call; the problem
size is public, as every check's problems are by default. So the check also counts the memory the
call reads or writes, wherever it was taken: the kernel's *referenced* marks of every page the
sandbox's processes map, cleared before the call and counted after it, from outside
(``autograder.limits.TouchedTree``; in a learner's kernel, ``attnlib.checks.memory.TouchedMeter``).

Each attack here hides the matrix a way of its own, and each must fail the exercise as the plain
naive attention does, in ``attn-grade check`` and, graded in a batch beside honest students, by
``attn-grade batch`` and plain ``nbgrader autograde`` alike:

- ``ahead``: the buffer, filled when its cell ran;
- ``ahead-clears-marks``: then it writes ``1`` into ``/proc/self/clear_refs`` (the sandbox's
  ``/proc`` is read-only);
- ``ahead-marks-old``: then it asks ``madvise`` to mark the buffer's pages old (``MADV_COLD``,
  ``MADV_PAGEOUT``, ``MADV_FREE``: the sandbox's seccomp filter refuses them);
- ``ahead-in-a-child``: a child it forks writes the matrix into shared memory taken ahead and
  ends, and the function itself never looks at it; the memory is marked ``MADV_RANDOM``, for
  which the kernel keeps no mark of the child's use as it ends (shared memory counts whole);
- ``ahead-in-a-file``: the same child maps a file its cell wrote in ``/tmp``, which no process
  maps as the call ends (the sandbox's own ``/tmp`` and ``/dev/shm`` count whole);
- ``ahead-in-helpers``: processes its cell started, each holding a buffer of its own, do the work
  one call each and exit before the call returns (a process that ended during the call counts
  with all the memory it held as it began);
- ``ahead-given-back``: the buffer, mapped and filled before the call and unmapped as the call
  returns; a thread maps and fills a new one once the call has been read, so that every call
  starts with one. No call adds memory, and none ends mapping what it wrote: memory a process
  held as the call began and no longer holds counts as touched (its marks went with it);
- ``ahead-in-a-memfd``, ``ahead-in-a-segment``: the same with memory that lives on where no
  process maps it, a memfd held by a file descriptor and a System V segment held by the
  sandbox's IPC namespace, mapped again by the thread. As root the sandbox's cgroup counts such
  memory whole; graded as a normal user, with no cgroup, only what was given back tells;
- ``ahead-every-other-call``: the buffer in every second call on the measured problem, and a
  matrix taken during the call in the others: one call adds nothing and the next ends holding
  nothing it touched (a call touches at least the memory it adds, so each fails);
- ``ahead-remembers``: the buffer, and the answer to every problem it has seen, given back
  without any work when the same problem comes again (each measured call gets a problem drawn
  afresh, and its answer is checked).
"""

from __future__ import annotations

import inspect
import json
import math
import textwrap

import numpy as np
import pytest
from course import make_course, nbgrader
from test_grade_batch import attn_grade, grades
from test_grade_check import check, save
from test_grade_students import edit_cell, student_notebook, submit

from attnlib import checks
from benchmarks.touched import torch_blocks

pytestmark = [pytest.mark.slow, pytest.mark.lesson05]
LESSON = "05-complexity"
MESSAGE = "materialises the whole score matrix"

NAIVE = '''
import math

N = 4096  # the memory check's problem size: public
_HIDDEN = ~np.tril(np.ones((N, N), bool))  # the causal mask's hidden keys, taken ahead


def _scores_into(S, Q, K, V, causal):
    """Plain attention, its whole (m, n) score matrix written into S."""
    m, n = Q.shape[-2], K.shape[-2]
    np.matmul(Q, np.swapaxes(K, -1, -2), out=S)
    S *= 1 / math.sqrt(Q.shape[-1])
    if causal:
        hidden = _HIDDEN if (m, n) == (N, N) else ~np.tril(np.ones((m, n), bool))
        np.putmask(S, np.broadcast_to(hidden, S.shape), -np.inf)
    S -= S.max(-1, keepdims=True)
    np.exp(S, out=S)
    S /= S.sum(-1, keepdims=True)
    return S @ V


def _inputs(Q, K, V):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    shape = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2]) + (Q.shape[-2], K.shape[-2])
    return Q, K, V, shape, np.result_type(Q, K, V, 1.0)


def _public(shape, dtype):
    return shape == (N, N) and dtype == np.float64
'''

DURING = """
def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
"""

AHEAD = """
_AHEAD = np.ones((N, N))  # touched now, before any measurement


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    S = _AHEAD if _public(shape, dtype) else np.empty(shape, dtype)
    out = _scores_into(S, Q, K, V, causal)
    _hide(S)
    return out
"""

HIDES = {
    "ahead": """
def _hide(S):
    pass
""",
    "ahead-clears-marks": """
import contextlib


def _hide(S):
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("1")  # forget which pages were used
""",
    "ahead-marks-old": """
import ctypes
import mmap

_libc = ctypes.CDLL(None, use_errno=True)


def _hide(S):
    start = S.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    length = S.ctypes.data + S.nbytes - start
    for advice in (20, 21, 8):  # MADV_COLD, MADV_PAGEOUT, MADV_FREE: each marks pages old
        _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), advice)
""",
}

IN_A_CHILD = """
import mmap
import os

_SHARED = mmap.mmap(-1, N * N * 8)  # shared with the children forked later
np.frombuffer(_SHARED)[:] = 1.0  # touched now
_SHARED.madvise(mmap.MADV_RANDOM)  # then the kernel keeps no mark of a child's use as it ends
_OUT = mmap.mmap(-1, N * 64 * 8)


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if not _public(shape, dtype) or V.shape[-1] > 64:
        return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
    out = np.frombuffer(_OUT, count=N * V.shape[-1]).reshape(N, V.shape[-1])
    pid = os.fork()
    if pid == 0:  # the child writes the scores where this process never looks
        S = np.frombuffer(_SHARED).reshape(shape)
        out[...] = _scores_into(S, Q, K, V, causal)
        os._exit(0)
    os.waitpid(pid, 0)
    return out.copy()
"""

IN_A_FILE = """
import mmap
import os

_FILE = "/tmp/scores"
np.ones(N * N).tofile(_FILE)  # written now; no process maps it
_OUT = mmap.mmap(-1, N * 64 * 8)


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if not _public(shape, dtype) or V.shape[-1] > 64:
        return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
    out = np.frombuffer(_OUT, count=N * V.shape[-1]).reshape(N, V.shape[-1])
    pid = os.fork()
    if pid == 0:  # the child maps the file, writes the scores there, and ends
        S = np.memmap(_FILE, dtype=np.float64, mode="r+", shape=shape)
        out[...] = _scores_into(S, Q, K, V, causal)
        os._exit(0)
    os.waitpid(pid, 0)
    return out.copy()
"""

IN_HELPERS = """
import mmap
import os

_IN = mmap.mmap(-1, 3 * N * 16 * 8)  # Q, K, V of the public problem (d = 16)
_OUT = mmap.mmap(-1, N * 16 * 8)


def _helper():
    \"\"\"A process with its own touched buffer, waiting to do one call's work.\"\"\"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write)
        S = np.ones((N, N))  # touched now, in the helper
        causal = os.read(read, 1) == b"c"
        Q, K, V = np.frombuffer(_IN).reshape(3, N, 16)
        np.frombuffer(_OUT).reshape(N, 16)[...] = _scores_into(S, Q, K, V, causal)
        os._exit(0)
    os.close(read)
    return pid, write


_HELPERS = [_helper() for _ in range(6)]


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if not _public(shape, dtype) or Q.shape[-1] != 16 or V.shape[-1] != 16 or not _HELPERS:
        return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
    np.frombuffer(_IN).reshape(3, N, 16)[...] = Q, K, V
    pid, write = _HELPERS.pop()
    os.write(write, b"c" if causal else b"n")
    os.waitpid(pid, 0)
    return np.frombuffer(_OUT).reshape(N, 16).copy()
"""

# The matrix in memory mapped and filled before the call, unmapped as the call returns, and
# mapped and filled again by a thread once the call has been read, so that the next call starts
# with it too: no call adds it, and none ends with it mapped. The memory is given back
# (IN_PRIVATE_MEMORY), or lives on with no process mapping it: a memfd, held by a file
# descriptor, or a System V segment, held by the sandbox's IPC namespace.
UNMAPPED = """
import threading
import time

_SIZE = N * N * 8
_VIEWS = []
_AGAIN = threading.Event()


def _map_again():
    while True:
        _AGAIN.wait()
        _AGAIN.clear()
        time.sleep(0.1)  # the call has been read by now
        view = _attach()
        np.frombuffer(view)[:] = 1.0  # every page written: resident before the next call begins
        _VIEWS.append(view)


if _made():
    _VIEWS.append(_attach())
    np.frombuffer(_VIEWS[0])[:] = 1.0  # touched now, before any measurement
    threading.Thread(target=_map_again, daemon=True).start()


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if not _public(shape, dtype) or not _VIEWS:
        return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
    view = _VIEWS.pop()
    out = _scores_into(np.frombuffer(view).reshape(shape), Q, K, V, causal)
    _detach(view)  # no process maps the memory as the call ends
    _AGAIN.set()
    return out
"""

IN_PRIVATE_MEMORY = """
import mmap


def _made():
    return True


def _attach():
    return mmap.mmap(-1, N * N * 8, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _detach(view):
    view.close()  # given back
"""

IN_A_MEMFD = """
import mmap
import os

try:
    _FD = os.memfd_create("scores")
    os.ftruncate(_FD, N * N * 8)
except OSError:  # refused
    _FD = None


def _made():
    return _FD is not None


def _attach():
    return mmap.mmap(_FD, N * N * 8)


def _detach(view):
    view.close()
"""

IN_A_SEGMENT = """
import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmat.restype = ctypes.c_void_p
_libc.shmdt.argtypes = [ctypes.c_void_p]
_ID = _libc.shmget(0, N * N * 8, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600: -1 if refused


def _made():
    return _ID != -1


def _attach():
    return (ctypes.c_char * (N * N * 8)).from_address(_libc.shmat(_ID, None, 0))


def _detach(view):
    _libc.shmdt(ctypes.addressof(view))
"""

REMEMBERS = """
_AHEAD = np.ones((N, N))  # touched now, before any measurement
_SEEN = {}


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    key = (shape, dtype, Q.shape, K.shape, V.shape, Q.tobytes(), K.tobytes(), V.tobytes(), causal)
    if key not in _SEEN:  # a problem seen before gets its answer back, and no work is done
        S = _AHEAD if _public(shape, dtype) else np.empty(shape, dtype)
        _SEEN[key] = _scores_into(S, Q, K, V, causal)
    return _SEEN[key].copy()
"""

# Every other call on the measured problem takes its matrix during the call, the rest write it
# into the buffer taken ahead: one call adds nothing, the next ends holding nothing it touched.
ALTERNATES = """
_AHEAD = np.ones((N, N))  # touched now, before any measurement
_PUBLIC_CALLS = []


def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if not _public(shape, dtype):
        return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
    _PUBLIC_CALLS.append(causal)
    S = _AHEAD if len(_PUBLIC_CALLS) % 2 == 0 else np.empty(shape, dtype)
    return _scores_into(S, Q, K, V, causal)
"""

ATTACKS = {
    **{name: NAIVE + hide + AHEAD for name, hide in HIDES.items()},
    "ahead-remembers": NAIVE + REMEMBERS,
    "ahead-every-other-call": NAIVE + ALTERNATES,
    "ahead-in-a-child": NAIVE + IN_A_CHILD,
    "ahead-in-a-file": NAIVE + IN_A_FILE,
    "ahead-in-helpers": NAIVE + IN_HELPERS,
    "ahead-given-back": NAIVE + IN_PRIVATE_MEMORY + UNMAPPED,
    "ahead-in-a-memfd": NAIVE + IN_A_MEMFD + UNMAPPED,
    "ahead-in-a-segment": NAIVE + IN_A_SEGMENT + UNMAPPED,
}

# A right answer in PyTorch, block by block: PyTorch's allocator keeps more of what it freed than
# NumPy's does, and the grader measures the whole sandbox.
TORCH_BLOCKS = "import math\n\n" + inspect.getsource(torch_blocks).replace(
    "def torch_blocks(", "def chunked_attention("
)

# No memory taken at all: the plain naive attention, except on a problem of the memory check's
# size, where it answers at once with anything.
SKIPS = """
def chunked_attention(Q, K, V, block_size, causal=False):
    Q, K, V, shape, dtype = _inputs(Q, K, V)
    if _public(shape, dtype):
        return np.zeros(shape[:-1] + V.shape[-1:], dtype)
    return _scores_into(np.empty(shape, dtype), Q, K, V, causal)
"""

# Without a cgroup (a normal user) the grader sums its processes' resident memory, in which a
# child forked during the call counts its parent's pages again: such an attack may fail there
# for what it held.
FORKS_IN_THE_CALL = {"ahead-in-a-child", "ahead-in-a-file"}


def notebook(source: str):
    nb = student_notebook(LESSON, {})
    edit_cell(nb, "chunked_attention", source)
    return nb


# The file attack's matrix (128 MiB) is more than a sandbox's own /tmp holds by default (64 MB):
# its cell could not even write the file. Every grading here gives it room, as an instructor may.
ROOM = "256"


def failed(tmp_path, name: str, source: str) -> dict[str, str]:
    """The lesson's notebook with ``source`` as its ``chunked_attention``, checked as grading
    checks it (``attn-grade check``): each exercise it fails, with what the check said."""
    path = save(tmp_path, notebook(source), name, lesson=LESSON)
    done = check(path, "--json", "--no-record", "--tmp", ROOM, timeout=600)
    report = json.loads(done.stdout)
    return {e["name"]: e["message"] for e in report["exercises"] if not e["passed"]}


@pytest.mark.parametrize("name", ATTACKS)
def test_a_naive_attention_into_memory_taken_ahead_fails_the_memory_check(tmp_path, name):
    said = failed(tmp_path, name, ATTACKS[name])
    assert list(said) == ["chunked_attention"], said
    assert MESSAGE in said["chunked_attention"], said
    if name not in FORKS_IN_THE_CALL:  # held nothing more: what it touched fails it
        assert "read or wrote" in said["chunked_attention"], said


def test_the_same_naive_attention_fails_it_when_it_takes_its_memory_during_the_call(tmp_path):
    said = failed(tmp_path, "during", NAIVE + DURING)
    assert list(said) == ["chunked_attention"], said
    assert MESSAGE in said["chunked_attention"], said
    assert "peaked at" in said["chunked_attention"], said


def test_an_answer_that_skips_the_work_on_the_measured_problem_fails():
    """The measured calls' answers are checked: a call that does nothing uses no memory."""
    namespace = {"np": np, "math": math}
    exec(textwrap.dedent(NAIVE + SKIPS), namespace)
    outcome = checks.check("chunked_attention", namespace["chunked_attention"])
    assert not outcome.passed, outcome.feedback()
    assert "answer is wrong on the memory check's problem" in outcome.message, outcome.feedback()


@pytest.mark.parametrize("name", ["ahead", "ahead-remembers", "ahead-every-other-call"])
def test_in_a_learners_own_kernel_the_buffer_taken_ahead_fails_too(name):
    """The learner's test cell judges in its own process (``attnlib.checks``): one verdict."""
    namespace = {"np": np, "math": math}
    exec(textwrap.dedent(ATTACKS[name]), namespace)
    outcome = checks.check("chunked_attention", namespace["chunked_attention"])
    assert not outcome.passed and MESSAGE in outcome.message, outcome.feedback()
    assert "read or wrote" in outcome.message, outcome.feedback()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course of lesson 05: three honest students (one in PyTorch), the plain naive one, one
    that skips the work on the measured problem, and every attack, graded by ``attn-grade batch``
    and by plain ``nbgrader autograde``, each in a copy of the course."""
    courses = {}
    for way in ("batch", "nbgrader"):
        course = make_course(tmp_path_factory.mktemp(way), [LESSON])
        for student in ("honest", "honest-too"):
            submit(course, LESSON, student, student_notebook(LESSON, {}))
        submit(course, LESSON, "honest-torch", notebook(TORCH_BLOCKS))
        submit(course, LESSON, "during", notebook(NAIVE + DURING))
        submit(course, LESSON, "skips", notebook(NAIVE + SKIPS))
        for name, source in ATTACKS.items():
            submit(course, LESSON, name, notebook(source))
        courses[way] = course
    done = attn_grade(
        courses["batch"], "batch", LESSON, "--course", str(courses["batch"]), "--tmp", ROOM
    )
    assert done.returncode == 0, done.stderr[-3000:]
    done = nbgrader(courses["nbgrader"], "autograde", LESSON, f"--TrustedExecute.tmp_mb={ROOM}")
    assert done.returncode == 0, done.stderr[-3000:]
    return courses


@pytest.mark.parametrize("way", ["batch", "nbgrader"])
def test_graded_beside_honest_students_every_attack_loses_the_exercise_and_only_it(graded, way):
    scores = grades(graded[way], LESSON)
    cells = {cell for _, cell in scores}
    honest = {cell: scores["honest", cell] for cell in cells}
    assert all(points > 0 for points in honest.values()), honest
    assert {cell: scores["honest-too", cell] for cell in cells} == honest
    assert {cell: scores["honest-torch", cell] for cell in cells} == honest
    lost = {"test_chunked_attention"}
    for student in ("during", "skips", *ATTACKS):
        got = {cell: scores[student, cell] for cell in cells}
        assert {cell for cell in cells if got[cell] < honest[cell]} == lost, (student, got)
        assert got["test_chunked_attention"] == 0, (student, got)


def test_both_ways_give_every_student_the_same_grade_in_every_cell(graded):
    assert grades(graded["batch"], LESSON) == grades(graded["nbgrader"], LESSON)
