"""The course pipeline's ``CheckCellMetadata`` judges every notebook exactly as nbgrader's.

It is nbgrader's check with the schema's validator built once (nbgrader's builds it for every
cell); the same notebooks must pass, and the same corruptions must fail with the same error.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from nbgrader.nbgraderformat import SchemaTooNewError, SchemaTooOldError, ValidationError
from nbgrader.preprocessors import CheckCellMetadata as Theirs

from autograder.nbgrader_plugin import AUTOGRADE, SANITIZE_STEPS
from autograder.nbgrader_plugin import CheckCellMetadata as Ours

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("lessons/*/*.ipynb"))


def verdict(check: type, nb) -> str:
    """``"ok"``, or the type and message of what ``check`` raised."""
    try:
        check().preprocess(copy.deepcopy(nb), {})
    except (ValidationError, SchemaTooOldError, SchemaTooNewError) as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


def graded_cell(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))


CORRUPTIONS = {
    "points as text": lambda meta: meta.update(points="two"),
    "no grade id": lambda meta: meta.pop("grade_id"),
    "grade id with a space": lambda meta: meta.update(grade_id="my test"),
    "unknown key": lambda meta: meta.update(secret=1),
    "schema too old": lambda meta: meta.update(schema_version=1),
    "schema too new": lambda meta: meta.update(schema_version=99),
    "grade missing": lambda meta: meta.pop("grade"),
    "negative points": lambda meta: meta.update(points=-3),
}


def test_the_pipelines_use_the_course_check():
    assert Ours in SANITIZE_STEPS and Ours in AUTOGRADE and Theirs not in SANITIZE_STEPS + AUTOGRADE


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_course_notebook_passes_both(path):
    nb = nbformat.read(path, as_version=4)
    assert verdict(Ours, nb) == verdict(Theirs, nb) == "ok"


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupted_cell_fails_both_the_same_way(corruption):
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    CORRUPTIONS[corruption](graded_cell(nb).metadata["nbgrader"])
    ours, theirs = verdict(Ours, nb), verdict(Theirs, nb)
    assert ours == theirs, corruption
    if corruption != "unknown key":  # nbgrader removes extra keys with a warning
        assert ours != "ok", corruption
