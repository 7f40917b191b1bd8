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
  (``import numpy as np``, a helper "from lesson 02"); and a course cell in full after all when
  the learner's code missed a name it binds (``q5 = len(words)``, with ``words`` from the
  lesson's example): the check then goes round again, as :func:`autograder.selfcheck.run_check`
  says.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

from attnlib import checks

from .scoring import strip_magics

SETUP_TAG = "setup"


def runs_whole(cell: nbformat.NotebookNode) -> bool:
    """A cell the self-check runs in full: a solution cell, or a course cell tagged ``setup``."""
    meta = cell.get("metadata", {})
    return bool(meta.get("nbgrader", {}).get("solution")) or SETUP_TAG in meta.get("tags", [])


class NotebookError(ValueError):
    """The notebook cannot be read, or its lesson cannot be told."""


def read(path: Path) -> nbformat.NotebookNode:
    try:
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
    """The imports, definitions and literal assignments of a cell, as source code."""
    try:
        tree = ast.parse(strip_magics(source))
    except SyntaxError:
        return ""
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
            keep.append(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_literal(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(_binds_names(t) for t in targets):  # x = 3, not K[i] = [1.0]
                keep.append(node)
    return ast.unparse(ast.Module(body=keep, type_ignores=[]))


def bound_names(source: str) -> set[str]:
    """The names a cell's top-level code binds (assignments, loops, ``with``, imports, ``def``)
    — not those local to its functions, classes, lambdas or comprehensions."""
    try:
        tree = ast.parse(strip_magics(source))
    except SyntaxError:
        return set()
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
            return
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp
                      | ast.GeneratorExp):  # fmt: skip
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


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
