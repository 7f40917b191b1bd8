"""The untrusted side: run a notebook's cells with IPython and answer the grader's calls.

This module runs inside the sandboxed process (see :mod:`autograder.isolation`), which is
forked from a warm worker that has already imported NumPy, PyTorch, matplotlib, IPython and
``attnlib``. It executes code cells with an :class:`~IPython.core.interactiveshell.InteractiveShell`
(so magics and ``%matplotlib inline`` work as in a Jupyter kernel), turns what each cell printed,
displayed or raised into nbformat outputs, and sends them as JSON. Then it waits for the trusted
side's requests: call the learner's function on these arrays and send back the result as plain
arrays (:mod:`autograder.wire`), or send the plain value of an answer.

Nothing here is trusted by the grader: learner code runs in this process and may have changed
any of it. The trusted side only ever reads plain data from it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings

from . import wire

MISSING = object()


class Sink:
    """Collects one cell's outputs as nbformat output dicts, within a byte budget."""

    def __init__(self, budget: int):
        self.budget = budget  # bytes left for the whole notebook
        self.outputs: list[dict] = []
        self.truncated = False

    def begin(self) -> None:
        self.outputs = []

    def _spend(self, n: int) -> bool:
        if n <= self.budget:
            self.budget -= n
            return True
        return False

    def stream(self, name: str, text: str) -> None:
        if not text:
            return
        if self.truncated:
            return
        if not self._spend(len(text)):
            text = text[: max(self.budget, 0)] + (
                "\n... output truncated by attn-grade: the notebook printed too much ...\n"
            )
            self.budget = 0
            self.truncated = True
        last = self.outputs[-1] if self.outputs else None
        if last and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def data(self, output_type: str, data: dict, metadata: dict, count: int | None = None) -> None:
        clean = {str(k): v for k, v in data.items() if isinstance(v, str | dict | list)}
        size = sum(len(str(v)) for v in clean.values())
        if not self._spend(size):
            self.stream("stdout", f"[a {output_type} of {size} bytes was dropped: output limit]\n")
            return
        out = {"output_type": output_type, "data": clean, "metadata": _jsonable(metadata)}
        if output_type == "execute_result":
            out["execution_count"] = count
        self.outputs.append(out)

    def error(self, ename: str, evalue: str, traceback: list[str]) -> None:
        tb = [str(line)[:5000] for line in traceback[-200:]]
        self._spend(sum(len(t) for t in tb))
        self.outputs.append(
            {"output_type": "error", "ename": ename, "evalue": evalue[:20000], "traceback": tb}
        )

    def clear(self) -> None:
        self.outputs = []


def _jsonable(value: object) -> dict:
    return value if isinstance(value, dict) else {}


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
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(
            self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs
        ) -> None:
            sink.data("display_data", data, metadata or {})

        def clear_output(self, wait=False) -> None:
            sink.clear()

    class Hook(DisplayHook):
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict, md_dict=None) -> None:
            sink.data("execute_result", format_dict, md_dict or {}, self.prompt_count)

        def finish_displayhook(self) -> None:
            self._is_active = False

    class Shell(InteractiveShell):
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


_NOT_PRELOADED = {
    "antigravity",
    "this",
    "idlelib",
    "tkinter",
    "turtle",
    "turtledemo",
    "__phello__",
    "ensurepip",
    "venv",
    "lib2to3",
    "pydoc",
    "test",
    "msvcrt",
    "winreg",
    "winsound",
    "nt",
    "_msi",
    "msilib",
    "_overlapped",
    "_scproxy",
    "nturl2path",
    "_osx_support",
    "_aix_support",
    "readline",
    "curses",
}


def preload_stdlib() -> None:
    """Import the whole standard library now.

    A sandbox that runs as another user may not be able to read the interpreter's files (a
    pyenv Python under /root, say); modules already imported before the fork need no files.
    """
    import importlib
    import pkgutil

    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        for name in sorted(sys.stdlib_module_names):
            if name in _NOT_PRELOADED or name.startswith("_test"):
                continue
            with contextlib.suppress(BaseException):
                module = importlib.import_module(name)
                for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
                    if any(p in info.name for p in (".test", "idle", "tkinter", "__main__")):
                        continue
                    with contextlib.suppress(BaseException):
                        importlib.import_module(info.name)


def picture_cells(course, lesson: str) -> tuple[str, ...]:
    """The cells of a lesson that only build an ``attnlib.viz`` picture from literals.

    Cells like ``from attnlib.viz import MaskToggle`` + ``MaskToggle()``, read from the course's
    source notebooks (``c.CourseDirectory.source_directory``, default ``source``). They depend on
    nothing a learner writes, so a worker can run them before it forks.
    """
    from pathlib import Path

    import nbformat
    from traitlets.config.loader import PyFileConfigLoader

    course = Path(course)
    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        source_dir = config.CourseDirectory.source_directory
        source_dir = source_dir if isinstance(source_dir, str) else "source"
    except Exception:  # noqa: BLE001 — no config: nbgrader's default layout
        source_dir = "source"
    found = []
    for path in sorted((course / source_dir / lesson).glob("*.ipynb")):
        try:
            cells = nbformat.read(path, as_version=4).cells
        except Exception:  # noqa: BLE001 — an unreadable source just warms nothing
            continue
        found += [c.source for c in cells if c.cell_type == "code" and _is_picture(c.source)]
    return tuple(found)


def _is_picture(source: str) -> bool:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    imports = [n for n in body if isinstance(n, ast.ImportFrom) and n.module == "attnlib.viz"]
    calls = [n for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    if not imports or len(imports) + len(calls) != len(body) or len(calls) != 1:
        return False
    call = calls[0].value
    literal = (*call.args, *(k.value for k in call.keywords))
    try:
        for node in literal:
            ast.literal_eval(node)
    except ValueError:
        return False
    return isinstance(call.func, ast.Name)


def warm_up(picture_cells: tuple[str, ...] = ()) -> None:
    """Import and exercise what every notebook needs, once, before any fork.

    ``picture_cells`` (see :func:`picture_cells`) are run too, to fill ``attnlib.viz``'s cache.
    """
    preload_stdlib()
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401
    from matplotlib_inline import backend_inline  # noqa: F401

    import attnlib.numpy  # noqa: F401
    import attnlib.torch  # noqa: F401
    from attnlib import checks, quiz  # noqa: F401

    from . import hidden  # noqa: F401

    with contextlib.suppress(Exception):
        import attnlib.viz  # noqa: F401
    # Explorers cache their pictures by state: draw the lesson's opening pictures once here, so
    # a forked notebook that shows them gets the PNG without drawing it again.
    for source in picture_cells:
        with (
            contextlib.suppress(Exception),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            exec(compile(source, "<warm-up>", "exec"), {"__name__": "__warm_up__"})  # noqa: S102
    fig = plt.figure(figsize=(2, 2))
    fig.gca().imshow(np.eye(3))
    fig.gca().set_title("warm")
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    # hypothesis builds its strategies lazily: run one check so the first learner does not pay.
    with contextlib.redirect_stdout(io.StringIO()):
        checks.check("causal_mask", attnlib.numpy.causal_mask)


# ---------------------------------------------------------------------------------------------
# delegation: is the course's own implementation of this exercise doing the work?


def _reference_dirs() -> tuple[str, ...]:
    import attnlib

    from . import __file__ as autograder_init

    root = os.path.dirname(attnlib.__file__)
    return (
        os.path.join(root, "numpy") + os.sep,
        os.path.join(root, "torch") + os.sep,
        os.path.join(root, "checks") + os.sep,
        os.path.dirname(autograder_init) + os.sep,
    )


def _course_code(fn: object, name: str, dirs: tuple[str, ...]) -> bool:
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__", None)
    return bool(code and code.co_name == name and code.co_filename.startswith(dirs))


@contextlib.contextmanager
def _watch_for(name: str, dirs: tuple[str, ...], seen: list[bool]):
    """Note in ``seen`` whether a course function called ``name`` runs meanwhile."""

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_name == name and code.co_filename.startswith(dirs):
                seen[0] = True

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)


# ---------------------------------------------------------------------------------------------
# the child's main loop


def serve(sock, job: dict) -> None:
    """Run ``job["cells"]`` then answer requests until the trusted side says goodbye.

    Before a cell marked ``consult`` runs, the trusted side is asked to check it from outside
    (it calls back with requests) and sends its verdicts; the cell's ``report``, ``check`` and
    ``answer`` calls on exactly those functions then print or raise those verdicts instead of
    running the same checks a second time in here.
    """
    sink = Sink(int(job.get("max_output", 2**20)))
    out, err = Stream(sink, "stdout"), Stream(sink, "stderr")
    sys.stdout, sys.stderr = out, err
    shell = make_shell(sink)
    snapshots: dict[tuple[int, str], object] = {}
    dirs = _reference_dirs()
    verdicts = _install_verdicts(snapshots)
    for cell in job["cells"]:
        index, mode = cell["index"], cell.get("mode", "run")
        if mode == "skip":
            continue
        for ident in cell.get("snapshot", ()):
            snapshots[(index, ident)] = shell.user_ns.get(ident, MISSING)
        verdicts["cell"], verdicts["by_name"] = None, {}
        if cell.get("consult") and mode == "run":
            wire.send(sock, {"ev": "consult", "cell": index})
            given = _serve_requests(sock, sink, snapshots, dirs, out, err)
            if given is None:
                return
            verdicts["cell"], verdicts["by_name"] = index, given
        wire.send(sock, {"ev": "start", "cell": index})
        sink.begin()
        sys.stdout, sys.stderr = out, err
        try:
            shell.run_cell(cell["source"], store_history=True)
        except BaseException as error:  # noqa: BLE001 — nothing may stop the loop but death
            sink.error(type(error).__name__, "the cell could not run", [repr(error)])
        sys.stdout, sys.stderr = out, err
        verdicts["cell"], verdicts["by_name"] = None, {}
        outputs = [] if mode == "replay" else sink.outputs
        wire.send(
            sock,
            {
                "ev": "done",
                "cell": index,
                "outputs": outputs,
                "execution_count": shell.execution_count - 1,
            },
        )
    for ident in job.get("final_snapshot", ()):
        snapshots[(-1, ident)] = shell.user_ns.get(ident, MISSING)
    wire.send(sock, {"ev": "finished"})
    _serve_requests(sock, sink, snapshots, dirs, out, err)


def _serve_requests(sock, sink, snapshots, dirs, out, err) -> dict | None:
    """Answer requests until ``verdicts`` (returned) or ``bye`` / a closed socket (None)."""
    while True:
        try:
            request, buffers = wire.recv(sock)
        except wire.WireError:
            return None
        op = request.get("op")
        if op == "bye":
            return None
        if op == "verdicts":
            given = request.get("verdicts")
            return given if isinstance(given, dict) else {}
        sink.begin()
        try:
            reply, blobs = _answer(op, request, buffers, snapshots, dirs)
        except BaseException as error:  # noqa: BLE001
            reply, blobs = {"ok": False, "ename": "GraderError", "evalue": repr(error)}, []
        sys.stdout, sys.stderr = out, err
        wire.send(sock, reply, blobs)


def _install_verdicts(snapshots) -> dict:
    """Make ``report``/``check``/``answer`` give the trusted side's verdicts for this cell."""
    import attnlib.checks
    import attnlib.quiz

    from . import hidden

    state: dict = {"cell": None, "by_name": {}}
    real_report, real_check, real_answer = attnlib.checks.report, hidden.check, hidden.answer

    def given(name, value):
        v = state["by_name"].get(str(name))
        if not isinstance(v, dict) or state["cell"] is None:
            return None
        if snapshots.get((state["cell"], v.get("ident")), MISSING) is not value:
            return None
        return v

    def report(name, fn):
        v = given(name, fn)
        if v is None:
            return real_report(name, fn)
        print(("✓ " if v["passed"] else "✗ ") + str(v["feedback"]))
        return bool(v["passed"])

    def check(name, fn):
        v = given(name, fn)
        if v is None:
            return real_check(name, fn)
        if not v["passed"]:
            raise AssertionError(str(v["feedback"])) from None
        print(f"✓ {name}: hidden checks passed")

    def answer(lesson, key, value):
        v = given(key, value)
        if v is None:
            return real_answer(lesson, key, value)
        if not v["passed"]:
            raise AssertionError(str(v["feedback"]))
        print(f"✓ {key}")

    attnlib.checks.report, hidden.check, hidden.answer = report, check, answer
    return state


def _answer(op, request, buffers, snapshots, dirs) -> tuple[dict, list[bytes]]:
    key = (int(request.get("cell", -1)), str(request.get("name", "")))
    value = snapshots.get(key, MISSING)
    blobs: list[bytes] = []
    if op == "describe":
        return {
            "ok": True,
            "defined": value is not MISSING,
            "callable": value is not MISSING and callable(value),
            "type": type(value).__name__,
            "course_code": _course_code(value, str(request.get("exercise", "")), dirs),
        }, blobs
    if op == "value":
        if value is MISSING:
            return {"ok": True, "defined": False}, blobs
        return {"ok": True, "defined": True, "value": wire.encode(value, blobs)}, blobs
    if op in ("call", "extra"):
        from attnlib import checks

        exercise = str(request.get("exercise", ""))
        seen = [False]
        try:
            with checks.quiet(), _watch_for(exercise, dirs, seen):
                if op == "extra":
                    probe = checks.EXERCISES[exercise].extra[int(request["index"])]
                    message = probe(value)
                else:
                    args = wire.decode(request["args"], buffers)
                    kwargs = wire.decode(request["kwargs"], buffers)
                    result = value(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 — the learner's exception is the answer
            name = type(error).__name__
            try:
                text = str(error)
            except Exception:  # noqa: BLE001
                text = "<unprintable>"
            return {"ok": False, "ename": name, "evalue": text[:2000], "delegated": seen[0]}, blobs
        if op == "extra":
            return {
                "ok": True,
                "message": None if message is None else str(message),
                "delegated": seen[0],
            }, blobs
        return {
            "ok": True,
            "result": wire.encode(result, blobs),
            "args": wire.encode(list(args), blobs),
            "kwargs": wire.encode(dict(kwargs), blobs),
            "delegated": seen[0],
        }, blobs
    return {"ok": False, "ename": "GraderError", "evalue": f"unknown request {op!r}"}, blobs
