"""Read a learner's notebook into a namespace of the functions and answers it defines.

The self-check and the pytest plugin do not run a notebook top to bottom (that would replay
training runs and figures). They run, in order:

* every nbgrader *solution* cell in full — that is the learner's work;
* from every other code cell except graded test cells, only its imports and its ``def`` and
  ``class`` statements, and assignments whose right-hand side is a literal — the set-up the
  solutions may rely on (``import numpy as np``, a helper "from lesson 02").

Graded test cells are never run: what they check is run from :mod:`attnlib.checks` instead, so
a learner who edits or deletes a locked test cell changes nothing.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnlib import checks

LESSON_ID = re.compile(r"\b(0[1-5]-[a-z-]+?)(?:[/\\.]|$)")


class NotebookError(ValueError):
    """The notebook cannot be read, or its lesson cannot be told."""


@dataclass
class LoadedNotebook:
    """What a learner's notebook defines: its lesson, namespace, and cells that failed."""

    path: Path
    lesson: str
    namespace: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def exercises(self) -> list[str]:
        """The lesson's contract exercises, in order."""
        return [e.name for e in checks.LESSONS[self.lesson]]


def lesson_of(path: Path, nb: nbformat.NotebookNode | None = None) -> str:
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


def _setup_only(source: str) -> str:
    """The imports, definitions and literal assignments of a cell, as source code."""
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        return ""
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
            keep.append(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_literal(node.value):
            keep.append(node)
    return ast.unparse(ast.Module(body=keep, type_ignores=[]))


def _is_literal(node: ast.AST | None) -> bool:
    if node is None:
        return False
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _strip_magics(source: str) -> str:
    """Drop IPython magics and shell escapes (``%matplotlib inline``, ``!pip``)."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def load(path: str | Path) -> LoadedNotebook:
    """Run the learner's solution cells (and the set-up around them) from ``path``."""
    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 — any unreadable file gets the same clear answer
        raise NotebookError(f"{path} is not a readable notebook: {error}") from None
    loaded = LoadedNotebook(path, lesson_of(path, nb), {"__name__": "__learner__"})
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            continue  # a graded test cell: the checks run from attnlib instead
        source = _strip_magics(cell.source) if meta.get("solution") else _setup_only(cell.source)
        if not source.strip():
            continue
        name = meta.get("grade_id") or f"cell {index}"
        try:
            code = compile(source, f"<{path.name}: {name}>", "exec")
            with contextlib.redirect_stdout(io.StringIO()), checks.quiet():
                exec(code, loaded.namespace)  # noqa: S102 — the learner's own code, by design
        except Exception as error:  # noqa: BLE001 — report and go on, like a notebook would
            loaded.errors.append(f"{name}: {type(error).__name__}: {error}")
    return loaded
