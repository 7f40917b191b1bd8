"""The template: a warm process that forks one clean sandbox per submission.

``python -m autograder.sandbox.template FD ISOLATE`` is started by the trusted side
(:mod:`autograder.template`), inside bubblewrap's read-only view when isolation is on. It imports
NumPy, matplotlib, IPython, PyTorch (unless the lesson never uses it: :data:`WITHOUT_TORCH`) and
the lesson's edition of attnlib, builds the IPython shell, makes its memory unreadable to others,
and then waits on its control socket (file descriptor ``FD``). It never receives a submission: the
only request is "fork", which carries a fresh socket (``SCM_RIGHTS``) and, from a template that
several graders share, the user id the sandbox is to run as (:func:`autograder.protocol.
fork_request`). So every sandbox starts from a process that never held another student's data.

For each request the template forks a *child*, which becomes the user id asked for (dropping the
two capabilities a shared template keeps for that: :func:`.confine.become`), closes the control
socket and says hello on the fresh socket (the kernel attaches its process id,
``SCM_CREDENTIALS``), waits for ``go`` with the limits (the trusted side has meanwhile put it in
its own cgroups), enters new namespaces (:mod:`.confine`) and forks the *init*, which forks the
*executor*. The executor drops every capability, says hello again (so the trusted side knows whom
to interrupt) and serves requests (:mod:`.executor`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import signal
import socket
import sys
import warnings

from .. import protocol
from . import confine, syscalls
from .executor import WORKDIR, Executor, Sink, make_shell

ENV = ("ATTN_STUDENT",)  # what the trusted side may add to one sandbox's environment
# Lessons whose notebooks never use PyTorch: their template leaves a CPU build of it unloaded
# (about 2 s of CPU and 0.5 GB of address space less); a learner who imports it anyway loads it in
# the sandbox, within the sandbox's own limits. A build for a GPU is loaded all the same
# (:func:`gpu_build`). tests/test_sandbox.py checks this against the notebooks.
WITHOUT_TORCH = frozenset({"01-scoring"})
# Lessons whose notebooks train a PyTorch model. A process's first optimizer imports PyTorch's
# compiler front end, torch._dynamo (sympy among it: about 2 s of CPU), which a lesson that trains
# would otherwise pay in every sandbox; their template builds one optimizer before any fork.
# tests/test_sandbox.py checks this against the notebooks.
TRAINS = frozenset({"03-self-cross", "04-multi-head", "06-build-and-train"})
GPU_RUNTIMES = frozenset({"cuda", "hip", "rocm", "xpu"})  # torch.version's names of its GPU


def warm_up() -> tuple[object, Sink]:
    """Import and exercise what every notebook of the lesson needs, once, before any fork."""
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    lesson = os.environ.get("ATTN_LESSON")
    with_torch = lesson not in WITHOUT_TORCH or gpu_build()
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        import matplotlib

        matplotlib.use("agg")
        import matplotlib.pyplot as plt
        import numpy as np

        names = ["attnlib.numpy", "attnlib.viz", "attnlib.measure"]
        # what a lesson's first cells import: the lesson's tracker and the hook it installs
        # (:mod:`attnlib.checks.follow`), its questions (below), NumPy's random generators
        names += ["attnlib.lesson", "attnlib.checks.follow", "numpy.random"]
        if with_torch:
            import torch  # noqa: F401

            names.append("attnlib.torch")

        import attnlib.checks
        import attnlib.mastery  # noqa: F401
        import autograder.hidden  # noqa: F401

        for name in names:
            with contextlib.suppress(Exception):
                __import__(name)
        with contextlib.suppress(Exception):
            from attnlib import quiz

            quiz.questions(lesson)  # imports the lesson's own questions
        sink = Sink()
        shell = make_shell(sink)
        _load_magics(shell)
        _draw_once(plt, np)
        _format_a_traceback(shell)
        if lesson in TRAINS:
            _optimise_once()
    return shell, sink


def gpu_build() -> bool:
    """Whether the installed PyTorch is built for a GPU (CUDA, ROCm or XPU), read from its
    ``torch/version.py`` without importing it. Such a build maps its GPU runtime as it is
    imported, GPU or not: about 3 GB of address space for PyPI's CUDA 13 build on Linux, against
    0.5 GB for the CPU build. That is more than a sandbox may map above what its template holds
    (``memory_mb``), so a learner's ``import torch`` would fail in the sandbox of a lesson whose
    template left it out, and pass in their own kernel."""
    try:
        spec = importlib.util.find_spec("torch")
        with open(os.path.join(spec.submodule_search_locations[0], "version.py"), "rb") as f:
            tree = ast.parse(f.read())
    except Exception:  # noqa: BLE001 — no PyTorch, or one laid out otherwise: as a CPU build
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            names = node.targets if isinstance(node, ast.Assign) else [node.target]
            built_for = {getattr(name, "id", "") for name in names} & GPU_RUNTIMES
            if built_for and node.value.value is not None:
                return True
    return False


def _load_magics(shell) -> None:
    """Register every magic IPython declares lazily (its own ``module:Class`` ones; an extension
    waits until used, as in a kernel), so a sandbox's first ``%config`` — which lists them all
    — does not import them."""
    with contextlib.suppress(Exception):
        shell.magics_manager.load_all_lazy_magics()


def _draw_once(plt, np) -> None:
    """Draw a labelled heat map as the notebook's inline figures are drawn (tight layout, tight
    bounding box, PNG), so every sandbox starts with matplotlib's fonts found and loaded."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.imshow(np.eye(3), cmap="viridis")
    for size in (7, 8, 9, 10, 11, 12):
        ax.text(0, 0, "Σ=0.25 keys queries → 0123456789", fontsize=size)
    ax.set(title="title", xlabel="keys", ylabel="queries")
    fig.tight_layout()
    fig.canvas.print_figure(io.BytesIO(), format="png", bbox_inches="tight")
    plt.close(fig)


def _optimise_once() -> None:
    """Build one optimiser, so every sandbox starts with what a process's first optimiser loads
    (``torch.optim`` imports ``torch._dynamo`` then) already loaded. It takes no step: the
    template runs no parallel kernel of PyTorch's before forking."""
    import torch

    torch.optim.Adam([torch.zeros(2, requires_grad=True)])


def _format_a_traceback(shell) -> None:
    """Format one traceback as a failing cell's is formatted, from code that, like a cell's, is
    no module's file: every sandbox starts with ``inspect``'s map from files to modules built
    (the first such traceback in a process looks through every module imported to build it)."""
    try:
        exec(compile("raise ValueError('warming up')", "<warm-up>", "exec"), {})
    except ValueError as error:
        shell.InteractiveTB.structured_traceback(type(error), error, error.__traceback__)
    shell.InteractiveTB.tb = None  # no traceback of the template's own is left to debug


def main(argv: list[str]) -> None:
    control = socket.socket(fileno=int(argv[1]))
    isolate = argv[2] == "1"
    shell, sink = warm_up()
    confine.no_dumps()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    protocol.send(control, {"ev": "ready", "pid": os.getpid()})
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    while True:
        try:
            request, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError:
            return
        if not fds:  # the trusted side closed the control socket: we are done
            return
        pid = os.fork()
        if pid == 0:
            status = 1
            sock = socket.socket(fileno=fds[0])
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                control.close()
                child(sock, isolate, shell, sink, protocol.fork_uid(request))
                status = 0
            except BaseException as error:  # noqa: BLE001 — never return into the template
                with contextlib.suppress(BaseException):
                    sock.sendall(
                        protocol.FAILED + f"{type(error).__name__}: {error}"[:2000].encode()
                    )
            finally:
                os._exit(status)
        for fd in fds:
            os.close(fd)


def child(sock: socket.socket, isolate: bool, shell, sink: Sink, uid: int | None = None) -> None:
    """The per-submission process chain: child → init → executor (see the module doc). ``uid``:
    the user id the grader that asked claimed for its sandboxes (None: stay as the template)."""
    if isolate and (uid is not None or confine.capabilities()):
        # a shared template holds CAP_SETUID and CAP_SETGID: no child keeps them past this line
        confine.become(os.getuid() if uid is None else uid)
    confine.die_with_parent()
    confine.isolate_fds(sock)
    sock.sendmsg([protocol.HELLO])
    go, _ = protocol.recv(sock)
    limits = go.get("limits") or {}
    if isolate:
        confine.enter_namespaces()
    else:  # no PID namespace: an orphan comes here, so it stays in the tree that is killed
        confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
    first = os.fork()  # the init when isolated, else the executor itself
    if first:
        os._exit(confine.reap_until(first))
    confine.die_with_parent()
    if isolate:
        keep = tuple(str(p) for p in go.get("keep", []) if isinstance(p, str))
        confine.make_root(int(limits.get("tmp_mb", 64)), keep)
        executor = os.fork()
        if executor:
            os._exit(confine.reap_until(executor))
        confine.die_with_parent()
    else:
        os.setsid()
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)
    os.environ.update({"HOME": WORKDIR, "TMPDIR": "/tmp", "PWD": WORKDIR})
    extra = go.get("env") if isinstance(go.get("env"), dict) else {}
    os.environ.update({k: str(v)[:200] for k, v in extra.items() if k in ENV})
    confine.set_limits(
        confine.mapped_bytes() + int(limits.get("memory_mb", 2048)) * 2**20,
        int(limits.get("cpu_seconds", 600)),
        int(limits.get("processes", 64)) if isolate else None,
        file_bytes=int(limits.get("tmp_mb", 64)) * 2**20,  # no file larger than /tmp
    )
    if isolate:
        confine.drop_capabilities()
    syscalls.install()  # the trusted side sees whether it took (Seccomp_filters)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sock.sendmsg([protocol.HELLO])
    Executor(shell, sink).serve(sock)


if __name__ == "__main__":
    main(sys.argv)
