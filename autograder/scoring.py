"""Verdicts decided on the trusted side: the hidden checks, run here on the learner's functions.

A graded test cell names what it checks — ``check("softmax", softmax)``,
``answer("02-softmax-masking", "q1", q1)`` (:func:`hidden_calls`). Before the cell runs, each is
checked *here*, in the grader's process, with its own NumPy and :mod:`attnlib.checks`: the
learner's function stays in the sandbox and is called through :class:`Proxy`, which sends plain
arrays in and gets plain arrays back (:mod:`autograder.protocol`); a mastery answer is read as plain
data and judged by :mod:`attnlib.quiz`. Nothing the notebook prints, displays or sends decides a
verdict, and the sandbox holds neither the checks nor the answer keys nor attnlib's implementation
of the exercise (:mod:`autograder.view`), so there is nothing in it to patch or call instead.

One route to the course's implementation remains open whatever the sandbox holds: copying its
source text. :func:`copied_from_attnlib` compares the learner's function with attnlib's, names and
docstrings aside, and such a copy earns no points.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlib import checks, quiz
from attnlib.checks._core import Outcome

from . import protocol, submission
from .runner import Fault, Runner

# How deep a learner's syntax tree may nest for the recursive walks of the trusted side
# (``ast.unparse``, ``ast.NodeTransformer``; the lessons' code nests at most 20 deep)
MAX_DEPTH = 100


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
    tree = parsed(source)
    if tree is None:
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
        elif name == "check_answer" and reports and len(args) == 2:
            if isinstance(consts[0], str) and isinstance(consts[1], str):
                found.append(Call(cell_index, "answer", consts[1], consts[1], consts[0]))
    return list(dict.fromkeys(found))


def parsed(source: str) -> ast.Module | None:
    """A cell's code as a syntax tree (magics dropped), or None where Python cannot parse it: a
    syntax error, a null byte, or nesting deeper than the parser goes (it raises
    ``RecursionError`` or ``MemoryError`` there, and the kernel fails on the same cell)."""
    try:
        return ast.parse(strip_magics(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def deeper_than(tree: ast.AST, depth: int) -> bool:
    """Whether the syntax tree ``tree`` nests more than ``depth`` nodes deep."""
    return submission.deeper_than(tree, depth, ast.iter_child_nodes)


def strip_magics(source: str) -> str:
    """Drop IPython magics and shell escapes (``%matplotlib inline``, ``!pip``)."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


@dataclass
class Verdict:
    """The grader's verdict on one hidden call of a graded cell."""

    cell: int
    kind: str
    name: str
    passed: bool
    message: str = ""
    read: str = ""
    stand_ins: tuple[str, ...] = ()  # earlier exercises the verdict used the course's of

    def feedback(self) -> str:
        if self.passed:
            return f"{self.name}: {self.message or 'correct.'}"
        where = f" (Read: {self.read}.)" if self.read else ""
        return f"{self.name}: {self.message}{where}"

    def shown(self) -> dict:
        """What the sandbox's ``report``/``check``/``answer`` print for this verdict."""
        return {"passed": self.passed, "feedback": self.feedback()}


# ---------------------------------------------------------------------------------------------
# the learner's function, at arm's length


class Proxy:
    """Stands for the learner's function ``ident``: calls it in the sandbox, on plain data.

    ``stand_ins`` (name → trusted function) are bound to those names of the learner's namespace
    for each call, and a function among the arguments is passed too: either way the learner's
    code calls it back across the boundary (:mod:`autograder.protocol`, "Callbacks"), under a
    key that changes every call, so nothing tells one trusted function from another.
    """

    def __init__(self, runner: Runner, ident: str, stand_ins: dict | None = None):
        self.runner, self.ident = runner, ident
        self.stand_ins = dict(stand_ins or {})

    def __attn_adapted__(self, adapter: str, *args: object) -> object:
        """The learner's object driven by ``attnlib._adapters.ADAPTERS[adapter]``, in the
        sandbox (a module class, built and run there; only plain results come back)."""
        return self._call(args, {}, measure=False, adapter=adapter)[0]

    def _call(
        self, args: tuple, kwargs: dict, measure: bool, adapter: str = ""
    ) -> tuple[object, int]:
        callbacks: dict[str, object] = {}

        def remote(value: object) -> object:
            if not callable(value) or isinstance(value, np.ndarray):
                return value
            key = secrets.token_hex(8)
            callbacks[key] = value
            return protocol.Remote(key)

        blobs: list[bytes] = []
        header = {
            "op": "call",
            "name": self.ident,
            "args": protocol.encode(tuple(remote(a) for a in args), blobs),
            "kwargs": protocol.encode({k: remote(v) for k, v in kwargs.items()}, blobs),
            "stand_ins": {name: remote(fn).key for name, fn in self.stand_ins.items()},
            "adapter": adapter,
        }
        if measure:
            reply, got, used = self.runner.measure(header, blobs, callbacks)
        else:
            (reply, got), used = self.runner.request(header, blobs, callbacks), 0
        try:
            result = protocol.decode(reply.get("result"), got)
            after_args = protocol.decode(reply.get("args"), got)
            after_kwargs = protocol.decode(reply.get("kwargs"), got)
        except protocol.ProtocolError as error:
            raise ValueError(f"returned something unreadable ({error})") from None
        _write_back(list(args), after_args)
        if isinstance(after_kwargs, dict):
            _write_back(list(kwargs.values()), [after_kwargs.get(k) for k in kwargs])
        return result, used

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs, measure=False)[0]

    @staticmethod
    def peak(fn, *args, **kwargs) -> tuple[object, int]:
        """:func:`attnlib.checks.memory.traced_peak`'s part, measured on the whole sandbox."""
        if not isinstance(fn, Proxy):
            raise TypeError("the grader measures only the learner's own functions")
        return fn._call(args, kwargs, measure=True)


class Sandboxed:
    """The learner's namespace in the sandbox, for :func:`attnlib.checks.judge`."""

    def __init__(self, runner: Runner):
        self.runner = runner

    def learner(self, name: str) -> Proxy | None:
        try:
            info, _ = self.runner.request({"op": "describe", "name": name})
        except Fault:
            raise
        except Exception:  # noqa: BLE001 — the learner's code failed the request
            return None
        return Proxy(self.runner, name) if info.get("callable") else None

    def with_references(self, fn: Proxy, references: dict) -> Proxy:
        return Proxy(self.runner, fn.ident, {**fn.stand_ins, **references})


def _write_back(originals: list, afters: object) -> None:
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


# ---------------------------------------------------------------------------------------------
# verdicts


def _secret(limits) -> checks.Secret | None:
    """The grading's secret problems for the checks (docs/grading.md, "Secret problems")."""
    return (
        checks.Secret(limits.secret_seed, limits.secret_problems)
        if limits.secret_problems
        else None
    )


def check(runner: Runner, call: Call, sources: list[str], student: str = "") -> Verdict:
    """The verdict on ``call``, reached here (see the module doc); ``student`` is who submitted
    (mastery questions may have numbers of each learner's own)."""
    if call.kind == "answer":
        return _answer(runner, call, student or quiz.learner_id())
    exercise = checks.EXERCISES[call.name]

    def verdict(passed: bool, message: str = "", read: str = exercise.read) -> Verdict:
        return Verdict(call.cell, "check", call.name, passed, message, read)

    try:
        info, _ = runner.request({"op": "describe", "name": call.ident})
    except Fault as fault:
        return verdict(False, f"could not be checked: {fault.evalue}")
    except Exception as error:  # noqa: BLE001 — the learner's code failed the request
        return verdict(False, f"could not be checked ({type(error).__name__}: {error})")
    if not info.get("defined"):
        return verdict(False, f"{call.ident} is not defined (run the cell that defines it)")
    if not info.get("callable"):
        kind = protocol.text_field(info, "type", 60)
        return verdict(False, f"{call.name} is not a function (got {kind})")
    copied = copied_from_attnlib(sources, call.name)
    if copied:
        return verdict(False, f"{call.name} is a copy of {copied}; that earns no points. "
                              f"Write {call.name} yourself")  # fmt: skip
    proxy = Proxy(runner, call.ident)
    try:
        outcome = checks.judge(call.name, proxy, Proxy.peak, Sandboxed(runner),
                               _secret(runner.limits))  # fmt: skip
    except Exception as error:  # noqa: BLE001 — the checks themselves failed on this answer
        fault = _fault_in(error)
        if fault is not None:  # the sandbox failed (hypothesis may have wrapped it)
            return verdict(False, f"could not be checked: {fault.evalue}")
        outcome = Outcome(
            call.name,
            False,
            f"the checks failed on this answer ({type(error).__name__}: {error})",
            exercise.read,
        )
    return Verdict(call.cell, "check", call.name, outcome.passed, outcome.message,
                   outcome.read, outcome.stand_ins)  # fmt: skip


def _fault_in(error: BaseException) -> Fault | None:
    """The sandbox's fault behind ``error``, if any (inside exception groups and causes)."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, Fault):
            return error
        todo += list(getattr(error, "exceptions", ()))
        todo += [error.__cause__, error.__context__]
    return None


def _answer(runner: Runner, call: Call, student: str) -> Verdict:
    def verdict(passed: bool, message: str = "") -> Verdict:
        return Verdict(call.cell, "answer", call.name, passed, message)

    try:
        quiz.question(call.lesson, call.name)
    except ValueError as error:
        return verdict(False, str(error))
    try:
        reply, got = runner.request({"op": "value", "name": call.ident})
        value = protocol.decode(reply.get("value"), got) if reply.get("defined") else None
    except Fault as fault:
        return verdict(False, f"could not be read: {fault.evalue}")
    except Exception as error:  # noqa: BLE001 — unreadable, oversized, or the sandbox failed
        return verdict(False, f"could not be read ({error})")
    with quiz.as_learner(student):  # questions with numbers of each learner's own
        return verdict(*quiz.verdict(call.lesson, call.name, value))


# ---------------------------------------------------------------------------------------------
# copies of the course's own implementation


def copied_from_attnlib(sources: list[str], exercise: str) -> str | None:
    """Which attnlib function the learner's ``def exercise`` copies, if it is one of them."""
    learner = _definitions(tuple(sources)).get(exercise)
    if learner is None:
        return None
    shape = _shape(learner)
    for where, reference in _references(exercise):
        if shape == reference:
            return where
    return None


@functools.lru_cache(maxsize=2)
def _definitions(sources: tuple[str, ...]) -> dict[str, ast.FunctionDef]:
    """The last top-level ``def`` of each name across a notebook's code cells.

    Parsed once per notebook, not once per exercise (every check of a notebook looks through the
    same cells). Only the two latest notebooks' definitions are kept, so a worker never holds the
    parses of more, however many it grades. Read-only: the nodes are shared.
    """
    found: dict[str, ast.FunctionDef] = {}
    for source in sources:
        if "def" not in source:  # no function is defined here (keywords are ASCII)
            continue
        tree = parsed(source)
        for node in tree.body if tree is not None else []:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = node
    return found


@functools.cache
def _references(exercise: str) -> tuple[tuple[str, str], ...]:
    """The shapes of attnlib's own ``exercise`` in each backend, read from the source files
    (the package's ``from .module import name`` lines lead to each definition): nothing is
    imported, so the trusted side never loads PyTorch to compare a NumPy answer."""
    out = []
    for backend in ("attnlib.numpy", "attnlib.torch"):
        node = _definition(backend, exercise)
        if node is not None:
            out.append((f"attnlib's own {backend}.{exercise}", _shape(node)))
    return tuple(out)


def _definition(package: str, name: str) -> ast.FunctionDef | None:
    """The top-level ``def name`` that ``package`` re-exports, from the source files."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    init = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    for statement in init.body:
        if not (isinstance(statement, ast.ImportFrom) and statement.level == 1):
            continue
        for alias in statement.names:
            if (alias.asname or alias.name) != name or not statement.module:
                continue
            path = folder / (statement.module.replace(".", "/") + ".py")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == alias.name:
                    return node
    return None


def _shape(node: ast.FunctionDef) -> str | None:
    """The function's code with docstrings, annotations and the names it binds taken out; None
    for one nested deeper than attnlib's own code (and than the recursive walks here follow)."""
    if deeper_than(node, MAX_DEPTH):
        return None
    node = _Canonical().visit(ast.parse(ast.unparse(node)).body[0])
    return ast.dump(node, annotate_fields=False, include_attributes=False)


class _Canonical(ast.NodeTransformer):
    """Names bound inside the function (arguments, assignments) become ``v0, v1, …``."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = "f"
        node.returns = None
        node.decorator_list = []
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:] or [ast.Pass()]
        node.body = body
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            arg.arg, arg.annotation = self._rename(arg.arg), None
        for arg in (node.args.vararg, node.args.kwarg):
            if arg is not None:
                arg.arg, arg.annotation = self._rename(arg.arg), None
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Store) or node.id in self.names:
            node.id = self._rename(node.id)
        return node
