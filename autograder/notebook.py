"""Reading a learner's notebook for the self-check: which lesson, and what of each cell to run.

The self-check (``attn-grade check``, ``pytest --attn-notebook``) does not replay a notebook top to
bottom (that would redo training runs and figures). It runs, in order:

* every nbgrader *solution* cell in full — that is the learner's work;
* every graded test cell in full (its visible tests; the checks themselves run outside);
* every cell tagged ``setup`` (:data:`SETUP_TAG`) in full: a course cell whose every result later
  answers need and that is cheap to run (lesson 06's ``mine = sheet06.numbers()``, the learner's
  numbers for the mastery questions);
* from every other code cell, only its imports, its ``def`` and ``class`` statements, and
  assignments whose right-hand side is a literal — the set-up the solutions may rely on
  (``import numpy as np``, a helper "from lesson 02"). What a statement left out would have
  changed is forgotten, not left stale: a name it binds again (``T = len(words)`` after
  ``T = 4``) or changes in place (``scores[d_k] = ...``, ``history.append(loss)``) is deleted
  where the statement stood, so code reading it later fails as a missing name instead of
  reading a value that grading would not see;
* and a course cell in full after all when the learner's code missed a name it binds or
  changes (``q5 = len(words)``, with ``words`` from the lesson's example): the check then goes
  round again, as :func:`autograder.selfcheck.run_check` says.

Changes in place are read from the code: an assignment to, or ``del`` of, an item or attribute
of a name, and a method called for its effect alone (a statement ``x.append(y)``); not a
function that changes its argument (``np.fill_diagonal(A, 0)``). A module is never forgotten for
a change in place: ``plt.rcParams[...] = ...`` configures a library.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from pathlib import Path

import nbformat

from attnlib import checks

from . import notebook_format, submission
from .scoring import MAX_DEPTH, deeper_than, parsed

SETUP_TAG = "setup"


def runs_whole(cell: nbformat.NotebookNode) -> bool:
    """A cell the self-check runs in full: a solution cell, or a course cell tagged ``setup``."""
    meta = cell.get("metadata", {})
    return bool(meta.get("nbgrader", {}).get("solution")) or SETUP_TAG in meta.get("tags", [])


class NotebookError(ValueError):
    """The notebook cannot be read, or its lesson cannot be told."""


def read(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, if grading would take it, judged as grading judges it, in the
    same words: its bounds (:func:`submission.notebook_problems`), then whether nbformat reads
    it and it validates (:func:`notebook_format.file_problems`)."""
    resolved = Path(path).resolve()
    try:
        found = submission.notebook_problems(resolved) or notebook_format.file_problems(resolved)
    except OSError:
        found = []  # nbformat names the problem below
    if found:
        raise NotebookError(f"{path} would not be graded: {'; '.join(found)}")
    try:
        with warnings.catch_warnings():
            notebook_format.mend_cell_ids_quietly()  # as grading reads it, not a line per cell
            return nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 — any unreadable file gets the same clear answer
        raise NotebookError(f"{path} is not a readable notebook: {error}") from None


def lesson_of(path: Path) -> str:
    """The lesson id, from the notebook's folder or file name (``02-softmax-masking``)."""
    for part in (path.parent.name, path.stem):
        if part in checks.LESSONS:
            return part
    for lesson in checks.LESSONS:
        if lesson in str(path):
            return lesson
    raise NotebookError(
        f"cannot tell which lesson {path} belongs to: keep it in a folder named after the lesson "
        f"({', '.join(checks.LESSONS)})"
    )


def setup_only(source: str) -> str:
    """The imports, definitions and literal assignments of a cell, as source code; in place of
    each statement left out, the deletion of the names it would bind or change in place (a
    module's attributes are its settings, not its value: a module is not deleted)."""
    tree = _parse(source)
    if tree is None:
        return ""
    keep: list[ast.stmt] = []
    for node in tree.body:
        if _is_set_up(node):
            keep.append(node)
            continue
        bound = _bound(node)
        keep += [_forget(name) for name in sorted(bound)]
        keep += [
            _forget(name, unless_module=True) for name in sorted(_changed_in_place(node) - bound)
        ]
    return ast.unparse(ast.Module(body=keep, type_ignores=[]))


def changed_names(source: str) -> set[str]:
    """The names a cell's top-level code binds (assignments, loops, ``with``, imports, ``def``)
    or changes in place — not those local to its functions, classes, lambdas or
    comprehensions."""
    tree = _parse(source)
    return _bound(tree) | _changed_in_place(tree) if tree else set()


def _parse(source: str) -> ast.Module | None:
    """The cell's syntax tree, or None if it does not parse or nests deeper than the walks here
    (``ast.unparse``, :func:`_bound`) can follow."""
    tree = parsed(source)
    return None if tree is None or deeper_than(tree, MAX_DEPTH) else tree


def _is_set_up(node: ast.stmt) -> bool:
    """An import, a definition, or names bound to a literal (``x = 3``, not ``K[i] = [1.0]``)."""
    if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign) and _is_literal(node.value):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(_binds_names(t) for t in targets)
    return False


def _this_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what it holds, down to but not into the functions, classes, lambdas and
    comprehensions it defines (their names are bound here, their insides are not)."""
    yield node
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
                  | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):  # fmt: skip
        return
    for child in ast.iter_child_nodes(node):
        yield from _this_scope(child)


def _bound(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in _this_scope(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
    return out


def _changed_in_place(tree: ast.AST) -> set[str]:
    """The names whose items or attributes the code assigns or deletes, or whose method it
    calls as a statement of its own (``history.append(loss)``)."""
    out: set[str] = set()
    for node in _this_scope(tree):
        if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            out |= _root(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            if isinstance(node.value.func, ast.Attribute):
                out |= _root(node.value.func.value)
    return out


def _root(node: ast.AST) -> set[str]:
    """The name at the bottom of ``a.b[c].d``, if it is one."""
    while isinstance(node, ast.Subscript | ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def _forget(name: str, unless_module: bool = False) -> ast.stmt:
    """``del name``, if it is defined (and, ``unless_module``, not a module)."""
    delete = (
        f"if type({name}).__name__ != 'module':\n        del {name}"
        if unless_module
        else f"del {name}"
    )
    return ast.parse(f"try:\n    {delete}\nexcept NameError:\n    pass").body[0]


def _binds_names(target: ast.AST) -> bool:
    """``x`` or ``x, y``: names only, no subscripts or attributes of other objects."""
    if isinstance(target, ast.Tuple | ast.List):
        return all(_binds_names(t) for t in target.elts)
    return isinstance(target, ast.Name)


def _is_literal(node: ast.AST | None) -> bool:
    if node is None:
        return False
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True
