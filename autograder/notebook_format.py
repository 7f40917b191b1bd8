"""Whether a notebook is one that nbformat, and so nbgrader, takes; if not, one line saying where.

Grading reads a submitted notebook with nbformat (as version 4) and validates it against the
notebook format's schema after its first step, as nbconvert does after every step
(``nbgrader_plugin.Sanitize``): a notebook that fails either is not graded. nbformat's own words
for it name nothing a learner can find (``TypeError: pop expected at most 1 argument``, or the
whole cell, printed), so the line here names the place: ``cell 12's execution_count: 'x' is not
of type 'integer', 'null'``. The batch, plain nbgrader, ``attn-grade check``, the pytest plugin
and Validate all judge a notebook by :func:`format_problems` or :func:`schema_problems`.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nbformat
from jsonschema.exceptions import best_match
from nbformat.validator import get_validator
from nbformat.warnings import DuplicateCellId, MissingIDFieldWarning

from . import submission

SHOWN = 40  # characters of a wrong value quoted in the line


def format_problems(text: str, name: str) -> list[str]:
    """Why grading would not take notebook ``text`` (its file's text) named ``name``: nbformat
    cannot read it, or what it reads does not validate. Empty if it can and does, and for text
    that is not JSON (nbgrader names that problem itself, as for any student)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # missing cell ids and the like: nbformat mends them
            nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # noqa: BLE001 — whatever nbformat stops on, nbgrader stops on
        where = _described(raw) if isinstance(raw, dict) and raw.get("nbformat") == 4 else None
        return [f"{name} is not a valid notebook: {where or error}"]
    return schema_problems(nb, name)


def mend_cell_ids_quietly() -> None:
    """Let nbformat mend repeated and missing cell ids without a line for each (in this process,
    or within a ``warnings.catch_warnings()`` block).

    Where two cells share an id, or one has none, nbformat gives it a fresh one as it reads or
    validates the notebook, and warns once for every cell it mends, each time. Grading reads and
    validates a submission several times over, so one notebook whose cells all share an id filled
    a class's log with hundreds of lines. A grade depends on no cell id (nbgrader's are the grade
    ids, which :mod:`autograder.cells` sets right and reports), so the grader lets nbformat mend
    them quietly, as :func:`format_problems` does.
    """
    warnings.filterwarnings("ignore", category=DuplicateCellId)
    warnings.filterwarnings("ignore", category=MissingIDFieldWarning)


def file_problems(path: Path) -> list[str]:
    """:func:`format_problems` of the notebook file at ``path`` ([] if it cannot be read as
    text: the bounds, or nbformat, name that)."""
    try:
        text = submission.read(path, submission.MAX_NOTEBOOK_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError, submission.Refused):
        return []
    return format_problems(text, submission.shown(Path(path).name))


def schema_problems(nb, name: str) -> list[str]:
    """Why grading would not take notebook ``nb``, as nbformat read it, named ``name``: it does
    not validate against the notebook format's schema."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb, relax_add_props=True)  # as grading does
    except nbformat.ValidationError as error:
        return [f"{name} is not a valid notebook: {_described(nb) or error}"]
    return []


def _described(nb: dict) -> str | None:
    """Where ``nb`` fails the schema of version 4 and what is wrong there, in one line."""
    validator = get_validator(version=4, version_minor=nb.get("nbformat_minor"),
                              relax_add_props=True, name="jsonschema")  # fmt: skip
    error = best_match(validator.iter_errors(nb))
    while error is not None and error.validator == "oneOf" and error.context:
        # one branch per kind (of cell, of output): the branch of this one's kind says what
        branches: dict = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        kind = [errors for errors in branches.values() if not any(_on_kind(e) for e in errors)]
        if len(kind) != 1:
            break
        error = best_match(kind[0])
    if error is None:
        return None
    shown, message = repr(error.instance), error.message
    if message.startswith(shown) and len(shown) > SHOWN:
        message = shown[: SHOWN - 1] + "…" + message[len(shown) :]
    return f"{_where(list(error.absolute_path))}: {message}"


def _on_kind(error) -> bool:
    """An error about the kind of a cell or output (its ``cell_type`` or ``output_type``)."""
    return list(error.relative_path)[:1] in (["cell_type"], ["output_type"])


def _where(path: list) -> str:
    """``["cells", 11, "outputs", 0, "name"]`` → ``cell 12's outputs[0].name``."""
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        head, path = f"cell {path[1] + 1}", path[2:]
    else:
        head = "the notebook"
    rest = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{head}'s {rest}" if rest else head
