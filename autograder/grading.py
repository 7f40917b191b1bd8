"""The trusted side of grading one notebook: run it in a sandbox, then check it from outside.

:class:`Runner` executes a notebook's code cells in a sandboxed process
(:mod:`autograder.isolation`, :mod:`autograder.executor`), restarting the process when learner
code kills it, times out or exhausts a limit — the cell at fault gets an error, the cells before
it are replayed silently and the cells after it still run.

Then every hidden check of every graded test cell is run again *here*, in the grader's own
process, with pristine NumPy and the checks of :mod:`attnlib.checks`: the learner's function
stays in the sandbox and is called through a proxy that sends arrays in and gets plain arrays
back (:mod:`autograder.wire`). Monkeypatching ``np.allclose`` in the notebook, returning an
``ndarray`` subclass that lies about equality, or replacing ``autograder.hidden.check`` fool the
checks *inside* the notebook (and so fool ``nbgrader autograde``), but not these. A cell whose
outside check fails gets an ``AssertionError`` output with the diagnosis, so nbgrader's own
``SaveAutoGrades`` gives it zero; a cell whose outside checks all pass keeps its points even if
a warning reached stderr (its stderr text is kept, relabelled as stdout).
"""

from __future__ import annotations

import ast
import os
import re
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from attnlib import checks, quiz
from attnlib.checks._core import Outcome, _check_probe, search

from . import executor, isolation, wire

HIDDEN_MODULES = ("autograder", "autograder.hidden")


# ---------------------------------------------------------------------------------------------
# what a notebook's graded cells check


@dataclass(frozen=True)
class Call:
    """One hidden check in a graded cell: ``check(exercise, ident)`` or ``answer(...)``."""

    cell: int
    kind: str  # "check" | "answer"
    name: str  # exercise name, or question key
    ident: str  # the notebook variable it is called on
    lesson: str = ""


def hidden_calls(cell_index: int, source: str, reports: bool = False) -> list[Call]:
    """The ``check("softmax", softmax)`` / ``answer("02-…", "q1", q1)`` calls of a test cell.

    With ``reports``, the visible ``report("softmax", softmax)`` lines count too (the self-check
    of a released notebook, whose hidden checks are gone).
    """
    kinds = ("check", "assert_correct", "report") if reports else ("check", "assert_correct")
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        args = node.args
        consts = [a.value if isinstance(a, ast.Constant) else None for a in args]
        if name in kinds and len(args) >= 2:
            if isinstance(consts[0], str) and isinstance(args[1], ast.Name):
                if consts[0] in checks.EXERCISES:
                    found.append(Call(cell_index, "check", consts[0], args[1].id))
        elif name == "answer" and len(args) >= 3:
            if isinstance(consts[0], str) and isinstance(consts[1], str):
                if isinstance(args[2], ast.Name):
                    found.append(Call(cell_index, "answer", consts[1], args[2].id, consts[0]))
    return list(dict.fromkeys(found))


def _strip_magics(source: str) -> str:
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def is_graded_test(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution") and cell["cell_type"] == "code"


def is_solution(cell: dict) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


# ---------------------------------------------------------------------------------------------
# delegation to the course's own implementation, read from the source


_COURSE = re.compile(r"^(attnlib|autograder)(\.|$)")


def delegation_in_source(sources: list[str], exercise: str) -> str | None:
    """Where the learner's code hands ``exercise`` to attnlib's or the autograder's own version.

    Looks at imports (``from attnlib.numpy import softmax``), attribute chains that resolve to
    a course module (``an.softmax`` after ``import attnlib.numpy as an``) inside the learner's
    ``def softmax`` or an assignment ``softmax = …``, and the checks' ``reference``.
    """
    trees = []
    for source in sources:
        try:
            trees.append(ast.parse(_strip_magics(source)))
        except SyntaxError:
            continue
    aliases: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if _COURSE.match(a.name):
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:
                            root = a.name.split(".")[0]
                            aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and _COURSE.match(node.module):
                for a in node.names:
                    if a.name == exercise:
                        return f"`from {node.module} import {exercise}`"
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for tree in trees:
        for node in ast.walk(tree):
            body = None
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == exercise:
                body = node
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == exercise for t in node.targets
            ):
                body = node.value
            if body is None:
                continue
            for sub in ast.walk(body):
                dotted = _dotted(sub)
                if not dotted:
                    continue
                head, _, rest = dotted.partition(".")
                full = aliases.get(head)
                if full is None:
                    continue
                full = f"{full}.{rest}" if rest else full
                parts = full.split(".")
                if parts[-1] == exercise or "reference" in parts or "EXERCISES" in parts:
                    return f"`{dotted}` ({full})"
    return None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return ""


def delegation_message(exercise: str, where: str) -> str:
    return (
        f"{exercise} hands the work to the course's own implementation ({where}); that earns no "
        f"points. Write {exercise} yourself"
    )


# ---------------------------------------------------------------------------------------------
# running the cells


class Dead(Exception):
    """The sandbox cannot be (re)started any more."""


def _learner_error(ename: str, evalue: str) -> Exception:
    name = re.sub(r"\W", "_", str(ename))[:60] or "Error"
    if name[0].isdigit():
        name = "_" + name
    cls = type(name, (Exception,), {})
    return cls(str(evalue))


def _error_output(ename: str, evalue: str) -> dict:
    return {
        "output_type": "error",
        "ename": ename,
        "evalue": evalue,
        "traceback": [f"{ename}: {evalue}"],
    }


@dataclass
class Runner:
    """Runs code cells ``[(index, source, snapshot idents)]`` in a sandbox; see module doc."""

    cells: list[dict]
    limits: isolation.Limits = field(default_factory=isolation.Limits)
    uid: int | None = None
    env: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    final_snapshot: list[str] = field(default_factory=list)
    records: dict[int, dict] = field(default_factory=dict)
    faults: dict[int, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    slow: set[int] = field(default_factory=set)  # cells that hit the timeout: not replayed
    box: isolation.Sandbox | None = None
    launches: int = 0
    consult: object = None  # callable(cell index) -> verdicts for the sandbox, or None
    consulting: bool = False

    def run(self) -> None:
        """Execute every cell once (restarting after crashes); leave the sandbox serving."""
        while True:
            if self.launches > self.limits.restarts:
                for cell in self.cells:
                    if cell["index"] not in self.records and cell["index"] not in self.faults:
                        self.faults[cell["index"]] = _error_output(
                            "NotRun",
                            "attn-grade stopped running this notebook: it crashed its "
                            "process too many times",
                        )
                return
            if self._launch_and_execute():
                return

    def _job(self) -> dict:
        cells = []
        for cell in self.cells:
            i = cell["index"]
            replay = i in self.records
            # A replay skips what failed or hung, and the test cells (their verdicts stand).
            skip = i in self.faults or i in self.slow or (replay and cell.get("consult"))
            mode = "skip" if skip else "replay" if replay else "run"
            cells.append(
                {
                    "index": i,
                    "source": cell["source"],
                    "mode": mode,
                    "snapshot": cell.get("snapshot", []),
                    "consult": bool(cell.get("consult")),
                }
            )
        return {
            "cells": cells,
            "max_output": self.limits.max_output,
            "final_snapshot": self.final_snapshot,
        }

    def _launch(self) -> None:
        self.launches += 1
        job = self._job()
        self.box = isolation.start(
            lambda sock: _child(sock), self.limits, uid=self.uid, files=self.files, env=self.env
        )
        self.box.send({"job": job})

    def _launch_and_execute(self) -> bool:
        """One sandbox life: True when every cell ran and the sandbox awaits requests."""
        try:
            self._launch()
        except (OSError, wire.WireError) as error:
            self.notes.append(f"could not start the sandbox: {error}")
            self.box = None
            return False
        current = None
        while True:
            try:
                msg, _ = self.box.recv(timeout=self.limits.timeout if current is not None else 60)
            except wire.Timeout:
                if current is None:
                    self._fault(None, "Timeout", "the sandbox did not start in time")
                    return False
                if self._interrupt(current):
                    current = None
                    continue
                self._fault(
                    current,
                    "CellTimeoutError",
                    f"this cell ran longer than {self.limits.timeout:g} s and was "
                    "stopped (an infinite loop?)",
                )
                return False
            except wire.WireError:
                self._fault(
                    current,
                    "ProcessDied",
                    "the process running this notebook ended during this cell (os._exit, a "
                    f"crash, or a limit: {self.limits.memory_mb} MB of memory, "
                    f"{self.limits.cpu_seconds} s of CPU)",
                )
                return False
            ev = msg.get("ev")
            if ev == "consult" and self.consult is not None:
                current = int(msg["cell"])
                self.consulting = True
                try:
                    given = self.consult(current)
                finally:
                    self.consulting = False
                if self.box is None:  # the learner's code ended the process while checked
                    self._fault(
                        current,
                        "ProcessDied",
                        "the process running this notebook "
                        "ended while this cell's checks ran your code",
                    )
                    return False
                try:
                    self.box.send({"op": "verdicts", "verdicts": given})
                except OSError:
                    self._fault(
                        current,
                        "ProcessDied",
                        "the process running this notebook "
                        "ended while this cell's checks ran your code",
                    )
                    return False
            elif ev == "start":
                current = int(msg["cell"])
            elif ev == "done":
                self._record(msg)
                current = None
            elif ev == "finished":
                return True

    def _record(self, msg: dict, extra: dict | None = None) -> None:
        index = int(msg["cell"])
        if index in self.records:  # a replay: the first run's outputs stand
            return
        outputs = msg.get("outputs") or []
        if not isinstance(outputs, list):
            outputs = []
        outputs = [o for o in outputs if isinstance(o, dict)]
        if extra:
            outputs.append(extra)
        count = msg.get("execution_count")
        self.records[index] = {
            "outputs": outputs,
            "execution_count": count if type(count) is int else None,
        }

    def _interrupt(self, current: int) -> bool:
        """Send SIGINT for a cell over time; True if the cell then finished and we go on."""
        self.box.interrupt()
        try:
            msg, _ = self.box.recv(timeout=3)
        except wire.WireError:
            return False
        if msg.get("ev") != "done" or int(msg.get("cell", -1)) != current:
            return False
        timeout = _error_output(
            "CellTimeoutError",
            f"this cell ran longer than {self.limits.timeout:g} s and was interrupted",
        )
        self._record(msg, timeout)
        self.slow.add(current)
        return True

    def _fault(self, current: int | None, ename: str, evalue: str) -> None:
        if current is not None:
            self.faults[current] = _error_output(ename, evalue)
            self.records.pop(current, None)
            self.notes.append(f"cell {current}: {ename}: {evalue}")
        self.close()

    def close(self) -> None:
        if self.box is not None:
            try:
                self.box.send({"op": "bye"})
            except OSError:
                pass
            self.box.close()
            self.box = None

    def outputs(self) -> dict[int, dict]:
        """Every code cell's outputs and execution count, faults included."""
        out = {}
        for cell in self.cells:
            i = cell["index"]
            if i in self.faults:
                rec = self.records.get(i, {"outputs": [], "execution_count": None})
                out[i] = {
                    "outputs": [*rec["outputs"], self.faults[i]],
                    "execution_count": rec["execution_count"],
                }
            elif i in self.records:
                out[i] = self.records[i]
        return out

    # -- requests to the live sandbox ---------------------------------------------------------

    def request(self, header: dict, buffers: list[bytes] = ()) -> tuple[dict, list[bytes]]:
        """Send one request; relaunch (replaying silently) if the sandbox is gone."""
        if self.box is None:
            if self.consulting:
                raise Dead("the process running the notebook has ended")
            if self.launches > self.limits.restarts or not self._relaunch():
                raise Dead("the sandbox could not be restarted")
        try:
            self.box.send(header, buffers)
            return self.box.recv(timeout=self.limits.timeout)
        except wire.Timeout:
            self.close()
            raise _learner_error(
                "TimeoutError", f"took longer than {self.limits.timeout:g} s"
            ) from None
        except (OSError, wire.WireError):
            self.close()
            raise _learner_error(
                "ProcessDied", "the process running your code ended during this call"
            ) from None

    def _relaunch(self) -> bool:
        while self.launches <= self.limits.restarts:
            if self._launch_and_execute():
                return True
        return False


def _child(sock) -> None:
    header, _ = wire.recv(sock)
    executor.serve(sock, header["job"])


# ---------------------------------------------------------------------------------------------
# checks from outside


@dataclass
class Verdict:
    """The outside verdict on one hidden call of a graded cell."""

    cell: int
    kind: str
    name: str
    passed: bool
    message: str = ""
    read: str = ""

    def feedback(self) -> str:
        if self.passed:
            return f"{self.name}: correct."
        where = f" (Read: {self.read}.)" if self.read else ""
        return f"{self.name}: {self.message}{where}"


class _Proxy:
    """Stands for the learner's function: calls it in the sandbox, on plain data."""

    def __init__(self, runner: Runner, cell: int, ident: str, exercise: str):
        self.runner, self.cell, self.ident, self.exercise = runner, cell, ident, exercise
        self.delegated = False

    def _ask(self, header: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        header = {**header, "cell": self.cell, "name": self.ident, "exercise": self.exercise}
        reply, got = self.runner.request(header, buffers)
        if reply.get("delegated") is True:
            self.delegated = True
        if not reply.get("ok"):
            raise _learner_error(str(reply.get("ename", "Error")), str(reply.get("evalue", "")))
        return reply, got

    def __call__(self, *args, **kwargs):
        blobs: list[bytes] = []
        header = {
            "op": "call",
            "args": wire.encode(tuple(args), blobs),
            "kwargs": wire.encode(dict(kwargs), blobs),
        }
        reply, got = self._ask(header, blobs)
        try:
            result = wire.decode(reply["result"], got)
            after_args = wire.decode(reply["args"], got)
            after_kwargs = wire.decode(reply["kwargs"], got)
        except (KeyError, wire.WireError) as error:
            raise _learner_error("ValueError", f"unreadable result ({error})") from None
        _write_back(args, after_args)
        _write_back(
            [kwargs[k] for k in kwargs],
            [after_kwargs.get(k) for k in kwargs] if isinstance(after_kwargs, dict) else [],
        )
        return result

    def extra(self, index: int) -> str | None:
        reply, _ = self._ask({"op": "extra", "index": index}, [])
        message = reply.get("message")
        return None if message is None else str(message)


def _write_back(originals, afters) -> None:
    """Copy in-place changes the learner's code made to its inputs back onto ours."""
    afters = list(afters) if isinstance(afters, list | tuple) else []
    for i, original in enumerate(originals):
        if not isinstance(original, np.ndarray):
            continue
        after = afters[i] if i < len(afters) else None
        if isinstance(after, np.ndarray) and after.shape == original.shape:
            np.copyto(original, after, casting="unsafe")
        elif original.dtype.kind == "f":
            original[...] = np.nan  # changed beyond recognition: the check will say so


def check_outside(runner: Runner, call: Call, sources: list[str]) -> Verdict:
    """Run the checks of ``call`` here, on the learner's function in the sandbox."""
    if call.kind == "answer":
        return _answer_outside(runner, call)
    exercise = checks.EXERCISES[call.name]
    try:
        info, _ = runner.request(
            {"op": "describe", "cell": call.cell, "name": call.ident, "exercise": call.name}
        )
    except Exception as error:  # noqa: BLE001
        return Verdict(call.cell, "check", call.name, False, str(error), exercise.read)
    if not info.get("defined"):
        return Verdict(
            call.cell, "check", call.name, False, f"{call.ident} is not defined", exercise.read
        )
    if not info.get("callable"):
        return Verdict(
            call.cell,
            "check",
            call.name,
            False,
            f"{call.name} is not a function (got {info.get('type')})",
            exercise.read,
        )
    where = delegation_in_source(sources, call.name)
    if info.get("course_code") is True and not where:
        where = f"it is the course's own {call.name}"
    if where:
        return Verdict(
            call.cell,
            "check",
            call.name,
            False,
            delegation_message(call.name, where),
            exercise.read,
        )
    proxy = _Proxy(runner, call.cell, call.ident, call.name)
    try:
        outcome = _run_exercise(exercise, proxy)
    except Dead as error:
        outcome = Outcome(call.name, False, f"could not be checked: {error}", exercise.read)
    except Exception as error:  # noqa: BLE001 — the checks themselves failed on this answer
        # (inside the notebook the same failure is an error in the test cell: no points)
        outcome = Outcome(
            call.name,
            False,
            f"the checks failed on this answer ({type(error).__name__}: {error})",
            exercise.read,
        )
    if proxy.delegated:
        outcome = Outcome(
            call.name,
            False,
            delegation_message(call.name, f"attnlib's {call.name} ran inside it"),
            exercise.read,
        )
    return Verdict(call.cell, "check", call.name, outcome.passed, outcome.message, outcome.read)


def _run_exercise(exercise: checks.Exercise, proxy: _Proxy) -> Outcome:
    """:func:`attnlib.checks.run`, with the ``extra`` probes run beside the learner's code."""
    for probe in exercise.probes():
        verdict = _check_probe(exercise, proxy, probe)
        if verdict is not None:
            message, read = verdict
            return Outcome(exercise.name, False, message, read or exercise.read)
    for index in range(len(exercise.extra)):
        try:
            message = proxy.extra(index)
        except Dead:
            raise
        except Exception as error:  # noqa: BLE001
            message = f"raised {type(error).__name__}: {error}"
        if message:
            return Outcome(exercise.name, False, message, exercise.read)
    return search(exercise, proxy)


def _answer_outside(runner: Runner, call: Call) -> Verdict:
    try:
        question = quiz.question(call.lesson, call.name)
    except ValueError as error:
        return Verdict(call.cell, "answer", call.name, False, str(error))
    try:
        reply, got = runner.request({"op": "value", "cell": call.cell, "name": call.ident})
        value = wire.decode(reply["value"], got) if reply.get("defined") else None
    except Exception as error:  # noqa: BLE001
        return Verdict(call.cell, "answer", call.name, False, f"could not be read: {error}")
    if question.accepts(value):
        return Verdict(call.cell, "answer", call.name, True)
    return Verdict(
        call.cell, "answer", call.name, False, f"not right yet. Revisit: {question.topic}."
    )


# ---------------------------------------------------------------------------------------------
# one whole notebook


@dataclass
class Options:
    limits: isolation.Limits = field(default_factory=isolation.Limits)
    uid: int | None = None
    env: dict = field(default_factory=dict)
    picture_cells: tuple[str, ...] = ()  # run by each worker before it forks (warm-up)


def grade_notebook(nb: dict, options: Options, files: dict | None = None) -> dict:
    """Execute a (sanitized) notebook and check it from outside; plain data back.

    ``nb`` is the notebook as a dict (nbformat JSON). The result holds, per code cell index,
    the outputs and execution count to store, and the outside verdicts.
    """
    started = time.monotonic()
    cells, calls = [], {}
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        entry = {"index": index, "source": source}
        if is_graded_test(cell):
            found = hidden_calls(index, source)
            if found:
                calls[index] = found
                entry["snapshot"] = sorted({c.ident for c in found})
                entry["consult"] = True
        cells.append(entry)
    sources = [_source(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    runner = Runner(cells, options.limits, options.uid, options.env, files or {})
    verdicts: dict[int, list[Verdict]] = {}

    def consult(index: int) -> dict:
        found = [check_outside(runner, call, sources) for call in calls[index]]
        verdicts[index] = found
        return {
            v.name: {"passed": v.passed, "feedback": v.feedback(), "ident": call.ident}
            for v, call in zip(found, calls[index], strict=True)
        }

    runner.consult = consult
    try:
        runner.run()
        for index, found in calls.items():
            if index not in verdicts and index not in runner.faults:
                verdicts[index] = [check_outside(runner, call, sources) for call in found]
    finally:
        runner.close()
    outputs = runner.outputs()
    for index, found in verdicts.items():
        if index in runner.faults:
            continue
        rec = outputs.setdefault(index, {"outputs": [], "execution_count": None})
        rec["outputs"] = settle(rec["outputs"], found)
    return {
        "cells": {str(i): rec for i, rec in outputs.items()},
        "verdicts": [asdict(v) for found in verdicts.values() for v in found],
        "notes": runner.notes,
        "seconds": round(time.monotonic() - started, 3),
        "pid": os.getpid(),
    }


def settle(outputs: list[dict], verdicts: list[Verdict]) -> list[dict]:
    """A graded cell's outputs after the outside checks (see the module doc)."""
    failed = [v for v in verdicts if not v.passed]
    has_error = any(o.get("output_type") == "error" for o in outputs)
    if failed and not has_error:
        text = " ".join(v.feedback() for v in failed)
        return [
            *outputs,
            {
                "output_type": "error",
                "ename": "AssertionError",
                "evalue": text,
                "traceback": [
                    f"AssertionError: {text}",
                    "(found by attn-grade's checks outside the notebook)",
                ],
            },
        ]
    if not failed and not has_error:
        settled = []
        for o in outputs:
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                o = {**o, "name": "stdout", "text": "[stderr] " + str(o.get("text", ""))}
            settled.append(o)
        return settled
    return outputs


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)
