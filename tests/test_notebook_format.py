"""A notebook nbformat would not take is refused with a line naming the place, every way.

Grading reads a notebook with nbformat and validates it against the notebook format's schema, as
nbconvert does; nbformat's own words for a notebook it stops on name no cell (``TypeError: pop
expected at most 1 argument``, or the whole cell printed). ``autograder.notebook_format`` names
the place, and the batch, plain nbgrader's sanitizing, ``attn-grade check`` (and so the pytest
plugin) and Validate all judge by it. (The whole submission, graded beside honest ones, is
``breaks-the-format`` in the hostile corpus.)
"""

from __future__ import annotations

import copy
import json
import subprocess

import nbformat
import pytest
from course import BIN, REPO, env

from autograder import notebook, submission
from autograder.notebook_format import format_problems, schema_problems
from autograder.validation import CheckBounds

LESSON = "02-softmax-masking"
RELEASE = REPO / "lessons" / LESSON / f"{LESSON}.ipynb"
NAME = f"{LESSON}.ipynb"
CODE = 11  # the index of a code cell of the release (the softmax exercise's): cell 12


def _set(*path_and_value):
    *path, value = path_and_value

    def edit(nb: dict) -> None:
        where = nb
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return edit


def _drop(*path):
    def edit(nb: dict) -> None:
        where = nb
        for key in path[:-1]:
            where = where[key]
        del where[path[-1]]

    return edit


# edit of the release → the place and what is wrong there, as the line names them
BROKEN = {
    "execution count a string": (
        _set("cells", CODE, "execution_count", "x"),
        "cell 12's execution_count: 'x' is not of type 'integer', 'null'",
    ),
    "cell metadata a list": (  # nbformat's reading stops with a TypeError
        _set("cells", CODE, "metadata", []),
        "cell 12's metadata: [] is not of type 'object'",
    ),
    "notebook metadata a list": (
        _set("metadata", []),
        "the notebook's metadata: [] is not of type 'object'",
    ),
    "tags a string": (
        _set("cells", CODE, "metadata", "tags", "raises-exception"),
        "cell 12's metadata.tags: 'raises-exception' is not of type 'array'",
    ),
    "no source": (_drop("cells", CODE, "source"), "cell 12: 'source' is a required property"),
    "outputs a string": (  # nbformat's reading stops, "missing an expected key"
        _set("cells", CODE, "outputs", "x"),
        "cell 12's outputs: 'x' is not of type 'array'",
    ),
    "an output's stream name a number": (
        _set("cells", CODE, "outputs", [{"output_type": "stream", "name": 5, "text": "x"}]),
        "cell 12's outputs[0].name: 5 is not of type 'string'",
    ),
    "a cell a string": (_set("cells", 0, "hello"), "cell 1: 'hello' is not of type 'object'"),
    "kernelspec a string": (
        _set("metadata", "kernelspec", "x"),
        "the notebook's metadata.kernelspec: 'x' is not of type 'object'",
    ),
    "a cell of no kind": (  # the whole cell is quoted, shortened
        _set("cells", CODE, "cell_type", "foo"),
        "cell 12: {'cell_type': 'foo', 'execution_count':… is not valid under any of the given "
        "schemas",
    ),
}
# what nbformat mends or allows, and grading therefore grades: never refused
ALLOWED = {
    "no cell ids": lambda nb: [cell.pop("id") for cell in nb["cells"]],
    "a property the format does not name": _set("cells", CODE, "foo", 1),
    "a markdown cell with outputs": _set("cells", 0, "outputs", []),
}


def release() -> dict:
    return json.loads(RELEASE.read_text(encoding="utf-8"))


def edited(edit) -> dict:
    nb = copy.deepcopy(release())
    edit(nb)
    return nb


@pytest.mark.parametrize("case", BROKEN)
def test_a_notebook_nbformat_would_not_take_is_named_at_its_place(case):
    edit, place = BROKEN[case]
    assert format_problems(json.dumps(edited(edit)), NAME) == [
        f"{NAME} is not a valid notebook: {place}"
    ]


@pytest.mark.parametrize("case", ALLOWED)
def test_what_nbformat_mends_or_allows_is_taken(case):
    assert format_problems(json.dumps(edited(ALLOWED[case])), NAME) == []


def test_every_lesson_notebook_is_valid():
    for path in sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("lessons/*/*.ipynb")):
        assert format_problems(path.read_text(encoding="utf-8"), path.name) == [], path


def test_text_that_is_no_json_is_left_to_nbgrader():
    for text in ('{"cells": [ not', "[" * 100_000):
        assert format_problems(text, NAME) == []


def test_attn_grade_check_and_validate_refuse_it_in_the_same_words(tmp_path):
    edit, place = BROKEN["tags a string"]
    path = tmp_path / LESSON / NAME
    path.parent.mkdir()
    path.write_text(json.dumps(edited(edit)), encoding="utf-8")
    why = f"{NAME} is not a valid notebook: {place}"
    assert submission.notebook_problems(path) == []  # within the bounds
    with pytest.raises(notebook.NotebookError) as error:
        notebook.read(path)
    assert str(error.value) == f"{path} would not be graded: {why}"
    done = subprocess.run([str(BIN / "attn-grade"), "check", str(path), "--json", "--no-record"],
                          env=env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert json.loads(done.stdout)["error"] == str(error.value)
    # Validate gets the notebook as nbformat read it (invalid: it only logs that) and refuses it
    # before a kernel runs it
    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    assert schema_problems(nb, "the notebook") == [why.replace(NAME, "the notebook")]
    with pytest.raises(submission.Refused) as refused:
        CheckBounds().preprocess(nb, {})
    said = " ".join(str(refused.value).split())
    assert said == "This notebook would not be graded: " + why.replace(NAME, "the notebook")
