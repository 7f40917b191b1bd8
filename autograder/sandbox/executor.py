"""Run a notebook's cells with IPython and answer the trusted side's requests.

This runs inside the sandbox, in a process forked from the template (which already imported
NumPy, PyTorch, matplotlib, IPython and the lesson's edition of attnlib, and built the shell). It
executes code cells with an :class:`~IPython.core.interactiveshell.InteractiveShell` (magics and
``%matplotlib inline`` work as in a Jupyter kernel), turns what a cell printed, displayed or raised
into nbformat outputs, and answers each request of :mod:`autograder.protocol` with one reply.

Nothing here is trusted: learner code runs in this process and may change any of it. The trusted
side reads only plain data from it, caps what it keeps, and decides every grade itself.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import sys
from collections.abc import Callable

from .. import protocol
from . import verdicts

MISSING = object()
WORKDIR = "/tmp/work"


class Sink:
    """Collects one cell's outputs as nbformat output dicts, within a byte budget.

    A display with an id (``display(obj, display_id=True)``) that the cell updates is one output
    holding its last state, where it was first shown, as in JupyterLab: a live plot redrawn while
    a model trains is one figure, not a pile of them. An update of a display shown by an earlier
    cell is dropped: JupyterLab redraws that earlier cell, whose outputs are already sent.

    The budget only saves work: the trusted side caps what it keeps whatever this says.
    """

    def __init__(self, budget: int = 4 * 2**20):
        self.budget = budget
        self.outputs: list[dict] = []
        self.shown: dict[str, list[dict]] = {}  # display id → this cell's outputs that carry it

    def begin(self) -> None:
        self.outputs = []
        self.shown = {}

    def _spend(self, n: int) -> bool:
        if n <= self.budget:
            self.budget -= n
            return True
        self.budget = 0
        return False

    def stream(self, name: str, text: str) -> None:
        if not text:
            return
        if not self._spend(len(text)):
            text = text[:1000] + "\n... output truncated: the notebook printed too much ...\n"
        last = self.outputs[-1] if self.outputs else None
        if last and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def data(
        self, output_type: str, data: dict, metadata: dict, count: int | None = None,
        display_id: str | None = None, update: bool = False,
    ) -> None:  # fmt: skip
        clean = {str(k): v for k, v in data.items() if isinstance(v, str | dict | list)}
        size = _size(clean)
        if update:  # what is sent is the last state: the budget pays for growth only
            for out in self.shown.get(str(display_id), []):
                if self._spend(max(size - _size(out["data"]), 0)):
                    out["data"], out["metadata"] = dict(clean), dict(metadata or {})
            return
        if not self._spend(size):
            return
        out = {"output_type": output_type, "data": clean, "metadata": dict(metadata or {})}
        if output_type == "execute_result":
            out["execution_count"] = count
        self.outputs.append(out)
        if display_id is not None:
            self.shown.setdefault(str(display_id), []).append(out)

    def error(self, ename: str, evalue: str, traceback: list[str]) -> None:
        tb = [str(line)[:5000] for line in traceback[-100:]]
        self.outputs.append(
            {"output_type": "error", "ename": ename, "evalue": evalue[:20000], "traceback": tb}
        )

    def clear(self) -> None:
        self.outputs = []
        self.shown = {}


def _size(data: dict) -> int:
    return sum(len(str(v)) for v in data.values())


class Stream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of the learner's code: text goes to the sink."""

    def __init__(self, sink: Sink, name: str):
        self.sink, self.name_ = sink, name

    @property
    def name(self) -> str:
        return f"<{self.name_}>"

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        self.sink.stream(self.name_, text)
        return len(text)

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        pass


def make_shell(sink: Sink):
    """An InteractiveShell whose displays, results and errors land in ``sink``."""
    from IPython.core.compilerop import CachingCompiler
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(
            self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs
        ) -> None:
            display_id = transient.get("display_id") if isinstance(transient, dict) else None
            sink.data("display_data", data, metadata or {}, None, display_id, bool(update))

        def clear_output(self, wait=False) -> None:
            sink.clear()

    class Hook(DisplayHook):
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict, md_dict=None) -> None:
            sink.data("execute_result", format_dict, md_dict or {}, self.prompt_count)

        def finish_displayhook(self) -> None:
            self._is_active = False

    class Compiler(CachingCompiler):
        def cache(self, transformed_code, number=0, raw_code=None) -> str:
            name = super().cache(transformed_code, number, raw_code)
            _no_module_is(name)
            return name

    class Shell(InteractiveShell):
        compiler_class = Compiler
        displayhook_class = Hook
        display_pub_class = Publisher

        def enable_gui(self, gui=None):
            pass

        def _showtraceback(self, etype, evalue, stb):
            try:
                text = str(evalue)
            except Exception:  # noqa: BLE001 — a learner's exception may not print
                text = "<unprintable>"
            sink.error(getattr(etype, "__name__", "Error"), text, [str(s) for s in stb])

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Context"
    shell = Shell.instance(config=config)
    with contextlib.suppress(Exception):
        shell.enable_matplotlib("inline")  # what ipykernel's MPLBACKEND default gives
    return shell


def _no_module_is(filename: str) -> None:
    """Tell :mod:`inspect` that no module's file is ``filename``, a cell's name.

    Formatting a traceback asks ``inspect.getmodule`` for the module of every frame, several
    times over; for a cell's frame that finds none, and only after looking through every module
    imported (with PyTorch, well over a thousand: about 10 ms a failing cell). Where ``inspect``
    keeps what it found (``modulesbyfile``), the cell's name and its absolute form now lead to a
    module name nobody has, so the answer is the same, ``None``, without the search.
    """
    import inspect

    for name in (filename, os.path.normcase(os.path.abspath(filename))):
        inspect.modulesbyfile[name] = ""


class Executor:
    """Answers requests: run a cell, describe or call a function, read a value."""

    def __init__(self, shell, sink: Sink):
        self.shell, self.sink = shell, sink
        self.out, self.err = Stream(sink, "stdout"), Stream(sink, "stderr")
        self.handlers: dict[str, Callable[[dict, list[bytes]], tuple[dict, list[bytes]]]] = {
            "setup": self.setup,
            "run": self.run,
            "describe": self.describe,
            "call": self.call,
            "value": self.value,
        }

    def serve(self, sock) -> None:
        """One reply per request, until the trusted side goes away.

        The trusted side interrupts (SIGINT) a request that is over time. Only a request may be
        interrupted: between requests — reading one, sending a reply — SIGINT is blocked, and
        one that came too late (for a request already answered) is dropped before the next.
        """
        self.sock = sock
        sys.stdout, sys.stderr = self.out, self.err
        _interruptible(False)
        while True:
            try:
                request, buffers = protocol.recv(sock)
            except protocol.ProtocolError:
                return
            op = request.get("op")
            handler = self.handlers.get(op)
            try:
                if handler is None:
                    raise ValueError(f"unknown request {str(op)[:40]!r}")
                _interruptible(True)
                reply, blobs = handler(request, buffers)
                reply = {"ok": True, **reply}
            except BaseException as error:  # noqa: BLE001 — nothing may stop the loop but death
                reply, blobs = {"ok": False, **_describe_error(error)}, []
            finally:
                _interruptible(False)
            sys.stdout, sys.stderr = self.out, self.err
            protocol.send(sock, {**reply, "seq": request.get("seq")}, blobs)

    # -- requests ---------------------------------------------------------------------------

    def setup(self, request: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        """Write the files that sit beside the notebook into the working directory."""
        files = request.get("files") or {}
        for name, index in files.items():
            path = os.path.normpath(os.path.join(WORKDIR, str(name)))
            if not path.startswith(WORKDIR + os.sep):
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(buffers[int(index)])
        return {}, []

    def run(self, request: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        verdicts.CURRENT.clear()
        given = request.get("verdicts")
        if isinstance(given, dict):
            verdicts.CURRENT.update(given)
        self.sink.begin()
        sys.stdout, sys.stderr = self.out, self.err
        stand_ins = request.get("stand_ins") or {}
        try:
            with self._standing_in(stand_ins, Remote(self.sock)):
                self.shell.run_cell(str(request.get("source", "")), store_history=True)
        except BaseException as error:  # noqa: BLE001
            self.sink.error(type(error).__name__, "the cell could not run", [repr(error)[:2000]])
        finally:
            verdicts.CURRENT.clear()
        outputs = self.sink.outputs if request.get("record", True) else []
        return {
            "cell": request.get("cell"),
            "outputs": outputs,
            "execution_count": self.shell.execution_count - 1,
        }, []

    def _lookup(self, request: dict) -> object:
        return self.shell.user_ns.get(str(request.get("name", "")), MISSING)

    def describe(self, request: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        value = self._lookup(request)
        return {
            "defined": value is not MISSING,
            "callable": value is not MISSING and callable(value),
            "type": type(value).__name__,
        }, []

    def call(self, request: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        fn = self._lookup(request)
        remote = Remote(self.sock)
        args = protocol.decode(request.get("args"), buffers, functions=remote.function)
        kwargs = protocol.decode(request.get("kwargs"), buffers, functions=remote.function)
        if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
            raise ValueError("malformed call")
        stand_ins = request.get("stand_ins") or {}
        adapter = request.get("adapter")
        if adapter:  # the learner's object driven by course code (a module class, say)
            from attnlib._adapters import ADAPTERS

            fn = functools.partial(ADAPTERS[str(adapter)], fn)
        quiet = _quiet()
        with quiet(), self._standing_in(stand_ins, remote):
            result = fn(*args, **kwargs)
        blobs: list[bytes] = []
        return {
            "result": protocol.encode(result, blobs),
            "args": protocol.encode(list(args), blobs),
            "kwargs": protocol.encode(dict(kwargs), blobs),
        }, blobs

    @contextlib.contextmanager
    def _standing_in(self, stand_ins: dict, remote: Remote):
        """Bind names of the learner's namespace to remote functions for one call."""
        ns = self.shell.user_ns
        saved = {name: ns.get(name, MISSING) for name in stand_ins}
        for name, key in stand_ins.items():
            ns[str(name)] = remote.function(str(key))
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is MISSING:
                    ns.pop(name, None)
                else:
                    ns[name] = value

    def value(self, request: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        value = self._lookup(request)
        if value is MISSING:
            return {"defined": False}, []
        blobs: list[bytes] = []
        return {"defined": True, "value": protocol.encode(value, blobs)}, blobs


class Remote:
    """Stand-ins for functions that stay on the trusted side, for one ``call``.

    Calling one sends a callback (:mod:`autograder.protocol`) and waits for its answer; the
    answer's arrays are plain NumPy arrays, or tensors when the call was handed tensors (as the
    course's functions answer in a learner's kernel); an error is raised as an exception of
    that name.
    """

    def __init__(self, sock):
        self.sock, self.count = sock, 0

    def function(self, key: str) -> Callable[..., object]:
        def stand_in(*args, **kwargs):
            return self._call(key, args, kwargs)

        stand_in.__name__ = stand_in.__qualname__ = "reference"
        return stand_in

    def _call(self, key: str, args: tuple, kwargs: dict) -> object:
        n, self.count = self.count, self.count + 1
        blobs: list[bytes] = []
        header = {"op": "callback", "cb": n, "key": key,
                  "args": protocol.encode(tuple(args), blobs),
                  "kwargs": protocol.encode(dict(kwargs), blobs)}  # fmt: skip
        protocol.send(self.sock, header, blobs)
        reply, got = protocol.recv(self.sock)
        if reply.get("cb") != n:
            raise RuntimeError("the grader answered another callback")
        if not reply.get("ok"):
            name = str(reply.get("ename", "Error"))[:60]
            raise type(name if name.isidentifier() else "Error", (Exception,), {})(
                str(reply.get("evalue", ""))
            )
        return _like_arguments((*args, *kwargs.values()), protocol.decode(reply.get("result"), got))


def _interruptible(yes: bool) -> None:
    """Let SIGINT in (dropping one that waited: it was for a request already answered), or hold
    it off. A KeyboardInterrupt that slips in while holding it off is for a request just done."""
    if yes:
        signal.sigtimedwait({signal.SIGINT}, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            return
        except KeyboardInterrupt:
            continue


def _like_arguments(args: tuple, result: object) -> object:
    try:
        from attnlib._adapters import like_arguments
    except ImportError:
        return result
    return like_arguments(args, result)


def _quiet():
    """The course's ``quiet()``: learner code may warn without its warnings costing points."""
    try:
        from attnlib.checks.silence import quiet
    except ImportError:
        return contextlib.nullcontext
    return quiet


def _describe_error(error: BaseException) -> dict:
    try:
        text = str(error)
    except Exception:  # noqa: BLE001
        text = "<unprintable>"
    kind = next((c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins"), "")
    return {"ename": type(error).__name__[:200], "evalue": text[:2000], "builtin": kind[:60]}
