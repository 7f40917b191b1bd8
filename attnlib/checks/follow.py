"""Figures that work before the learner's code does.

A lesson's demonstrations call the learner's functions ("your attention, next to PyTorch's").
Until a function is written, or while it is wrong, such a cell would stop *Run All* and show
nothing. :func:`install` registers an IPython hook: before a cell runs, every exercise of the
lesson that the cell uses and that does not yet pass its fixed probes is bound, for that cell
only, to the course's implementation, and the cell says so in one line::

    (this cell uses the course's softmax: yours is not written yet)

A cell uses an exercise when it names it other than to read one of its attributes (it calls it,
or hands it on: ``checklist(attention)``, ``[("dot", dot_scores)]``), or when it names a function
of the notebook's own whose code does (``checklist`` defined in an earlier cell calls
``causal_mask``), however deep. ``print(softmax.__module__)`` does not use ``softmax``.

The stand-in is the checks' NumPy reference, except in a lesson whose learners write PyTorch
(:data:`TORCH_LESSONS`): there it is :mod:`attnlib.torch`'s, so a demonstration that goes on
with tensor methods (``.numpy()``, ``.mean(dim=…)``) runs with it as with a right answer.

The learner's own cells are left alone: a cell that defines an exercise (``def softmax(``) or
checks one (``report(``/``check(``) runs exactly as written, so its verdict is the learner's.
After the cell, each name is put back unless the cell itself rebound it.
"""

from __future__ import annotations

import ast
import dis
import importlib
import re
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType

from . import EXERCISES, LESSONS
from ._core import NOT_WRITTEN, Abort, CheckFailed, calm, examine

# Lessons whose exercises the learners write in PyTorch: demonstrations get attnlib.torch's.
TORCH_LESSONS = frozenset({"06-build-and-train"})


def install(lesson: str, shell=None) -> bool:
    """Register the hooks in ``shell`` (the running IPython); False outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or lesson not in LESSONS:
        return False
    follower = Follower(lesson, shell.user_ns, getattr(shell, "transform_cell", None))
    for event, hook in (("pre_run_cell", follower.before), ("post_run_cell", follower.after)):
        for old in [h for h in shell.events.callbacks[event] if _is_follower(h)]:
            shell.events.unregister(event, old)
        shell.events.register(event, hook)
    return True


def _is_follower(hook: Callable) -> bool:
    return isinstance(getattr(hook, "__self__", None), Follower)


def stand_in(name: str) -> Callable:
    """The course's implementation of exercise ``name`` that a demonstration uses instead of
    the learner's: :mod:`attnlib.torch`'s in a PyTorch lesson, else the checks' reference."""
    exercise = EXERCISES[name]
    if exercise.lesson in TORCH_LESSONS:
        found = getattr(importlib.import_module("attnlib.torch"), name, None)
        if callable(found):
            return found
    return exercise.reference


class Follower:
    """The pre- and post-cell hooks of :func:`install`, for one lesson's namespace.

    ``transform`` turns a cell's text into Python (IPython's ``transform_cell``: magics and
    ``!`` lines); without it a cell is read as it is.
    """

    def __init__(self, lesson: str, names: dict, transform: Callable[[str], str] | None = None):
        self.exercises = [e.name for e in LESSONS[lesson]]
        self.names = names
        self.transform = transform
        self.bound: dict[str, tuple[object, object]] = {}  # name → (learner's, stand-in)
        self.verdicts: dict[str, tuple[object, str]] = {}  # name → (fn judged, "" or why not)

    def before(self, info) -> None:
        source = getattr(info, "raw_cell", "") or ""
        if self._learners_own(source):
            return
        used = self.uses(source)
        for name in self.exercises:
            theirs = self.names.get(name)
            if name not in used or not callable(theirs):
                continue
            why = self._why_not(name, theirs)
            if why:
                course = stand_in(name)
                self.bound[name] = (theirs, course)
                self.names[name] = course
                print(f"(this cell uses the course's {name}: yours {why})")

    def after(self, result=None) -> None:
        for name, (theirs, course) in self.bound.items():
            if self.names.get(name) is course:
                self.names[name] = theirs
        self.bound = {}

    def _learners_own(self, source: str) -> bool:
        defines = any(
            re.search(rf"^\s*(def|class) {name}\b", source, re.M) for name in self.exercises
        )
        checks = re.search(r"\b(report|check|assert_correct|check_answer)\s*\(\s*[\"']", source)
        return defines or bool(checks)

    def uses(self, source: str) -> set[str]:
        """The exercises a cell with this text uses (see the module's docstring)."""
        exercises = set(self.exercises)
        try:
            code = self.transform(source) if self.transform is not None else source
            named = _named(ast.parse(code))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # not Python, or nested deeper than the parser goes: every word counts
            return {name for name in exercises if re.search(rf"\b{name}\b", source)}
        used = named & exercises
        todo, seen = sorted(named - exercises), set()
        while todo:  # through the notebook's own functions, to the exercises they name
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for code in _own_code(self.names.get(name), self.names):
                for found in _globals(code):
                    if found in exercises:
                        used.add(found)
                    elif found not in seen:
                        todo.append(found)
        return used

    def _why_not(self, name: str, fn: Callable) -> str:
        judged, why = self.verdicts.get(name, (None, ""))
        if judged is not fn:  # a new definition: judge it once
            why = _quick_verdict(name, fn)
            self.verdicts[name] = (fn, why)
        return why


def _named(tree: ast.AST) -> set[str]:
    """The names a cell reads, except those it only reads an attribute of (``f.__name__``)."""
    bases = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in bases
    }


def _own_code(value: object, names: dict) -> list[CodeType]:
    """The code of ``value`` if the notebook defined it: a function, or a class's methods."""
    if isinstance(value, FunctionType):
        return [value.__code__] if value.__globals__ is names else []
    if isinstance(value, type) and value.__module__ == names.get("__name__"):
        members = (
            getattr(m, "fget", None) or getattr(m, "__func__", m) for m in vars(value).values()
        )
        return [
            m.__code__ for m in members if isinstance(m, FunctionType) and m.__globals__ is names
        ]
    return []


def _globals(code: CodeType) -> Iterator[str]:
    """The global names ``code`` and the functions nested in it read."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield instruction.argval
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _globals(const)


def _quick_verdict(name: str, fn: Callable) -> str:
    """ "" when ``fn`` passes the exercise's fixed probes, else why not, in a few words."""
    exercise = EXERCISES[name]
    try:
        with calm():
            for probe in exercise.probes():
                failure = examine(exercise, fn, probe)
                if failure is not None:
                    not_written = failure.message == NOT_WRITTEN
                    return "is not written yet" if not_written else "is not right yet"
    except (CheckFailed, Abort):
        return "is not right yet"
    return ""
