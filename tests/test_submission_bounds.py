"""A notebook the grader reads is bounded, and the learner's code is parsed without surprises.

The grader parses every code cell of a submission on its own (trusted) side, where nothing limits
it but the machine: about 400 bytes of memory per byte of code, so one cell of 30 MB took the
batch's process 12 GB, and 100,000 empty cells a minute of its time. So a submission whose
notebook is larger, or holds more cells or source, than ``autograder.submission``'s bounds is
refused before it is parsed, with the count and the bound named, and ``attn-grade check`` says
the same of it. Every lesson's notebook stays far inside the bounds.

Code that Python's own parser gives up on (nesting deeper than it goes) is a cell that does not
parse, on the trusted side as in the kernel; and the recursive walks of the copy check and the
self-check never meet a tree deeper than ``scoring.MAX_DEPTH``. (The whole submissions, graded
beside honest ones, are in the hostile corpus: ``swells-a-cell``, ``floods-cells``,
``swells-the-source``, ``swells-the-file``, ``nests-too-deep``.)
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from course import BIN, REPO, env
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder import notebook, scoring, submission
from autograder.submission import (
    MAX_CELL_SOURCE,
    MAX_CELLS,
    MAX_NESTING,
    MAX_NOTEBOOK_BYTES,
    MAX_SOURCE,
)

LESSON_NOTEBOOKS = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("lessons/*/*.ipynb"))
# what Python's parser gives up on: a MemoryError, and a RecursionError
TOO_DEEP = ["x = " + "-" * 10_000 + "1", "y = " + "a+" * 10_000 + "a", "z = f" + "()" * 10_000]


def write(folder: Path, nb) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "02-softmax-masking.ipynb"
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb), encoding="utf-8")
    return path


def sizes(path: Path) -> tuple[int, int, int, int]:
    """A notebook's file size, cells, longest cell and source in all (characters)."""
    cells = [submission._source(c) for c in json.loads(path.read_bytes())["cells"]]
    longest = max(len(s) for s in cells)
    return path.stat().st_size, len(cells), longest, sum(len(s) for s in cells)


@pytest.mark.parametrize("path", LESSON_NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_lesson_notebook_is_far_inside_every_bound(path):
    size, cells, longest, total = sizes(path)
    assert 10 * size <= MAX_NOTEBOOK_BYTES and 10 * cells <= MAX_CELLS
    assert 10 * longest <= MAX_CELL_SOURCE and 10 * total <= MAX_SOURCE
    nb = json.loads(path.read_bytes())
    assert not submission.deeper_than(nb, MAX_NESTING // 8, submission._containers)
    assert submission.problems(path.parent) == []


def test_a_notebook_at_every_bound_passes_and_one_beyond_is_refused_naming_count_and_bound(
    tmp_path,
):
    # source at the bounds: cells of exactly MAX_CELL_SOURCE, MAX_SOURCE in all
    at = new_notebook(cells=[new_markdown_cell("n" * MAX_CELL_SOURCE) for _ in range(16)])
    assert 16 * MAX_CELL_SOURCE == MAX_SOURCE
    assert submission.problems(write(tmp_path / "at", at).parent) == []
    more = new_notebook(cells=[*at.cells, new_code_cell("x")])
    assert submission.problems(write(tmp_path / "source", more).parent) == [
        f"the cells of 02-softmax-masking.ipynb hold {MAX_SOURCE + 1:,} characters in all, more "
        f"than the {MAX_SOURCE:,} a notebook may hold"
    ]
    cell = new_notebook(cells=[new_code_cell("pass"), new_code_cell("\n  x = 1\n" * 9000)])
    assert submission.problems(write(tmp_path / "cell", cell).parent) == [
        "cell 2 of 02-softmax-masking.ipynb (it begins 'x = 1') holds 81,000 characters, more "
        f"than the {MAX_CELL_SOURCE:,} a cell may hold"
    ]
    cells = new_notebook(cells=[new_code_cell("") for _ in range(MAX_CELLS)])
    assert submission.problems(write(tmp_path / "cells", cells).parent) == []
    cells.cells.append(new_markdown_cell(""))
    assert submission.problems(write(tmp_path / "cells+1", cells).parent) == [
        f"02-softmax-masking.ipynb holds {MAX_CELLS + 1:,} cells, more than the {MAX_CELLS:,} a "
        "notebook may hold"
    ]
    big = new_notebook(cells=[new_code_cell("print('o' * 2**24)")])
    big.cells[0].outputs = [nbformat.v4.new_output("stream", text="o" * MAX_NOTEBOOK_BYTES)]
    found = submission.problems(write(tmp_path / "file", big).parent)
    assert found == [
        "02-softmax-masking.ipynb is larger than 16 MB, outputs included (Edit → Clear Outputs "
        "of All Cells makes it smaller)"
    ]


def test_the_bounds_count_every_form_a_notebook_file_holds(tmp_path):
    # version 3 keeps code in ``input``, cells in worksheets; nbformat converts it on reading
    code = {"cell_type": "code", "input": "x" * (MAX_CELL_SOURCE + 1)}
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [code]}]}
    assert "cell 1 of" in submission.problems(write(tmp_path / "v3", json.dumps(v3)).parent)[0]
    # lines as a list of strings, as nbformat writes them
    code = {"cell_type": "code", "source": ["x\n"] * (MAX_CELL_SOURCE // 2 + 1)}
    lines = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [code]}
    assert (
        "cell 1 of" in submission.problems(write(tmp_path / "lines", json.dumps(lines)).parent)[0]
    )
    # not a notebook at all: left to nbgrader, which says so for every student alike
    for name, text in {"garbled": '{"cells": [ not', "list": "[]", "null": "null"}.items():
        assert submission.problems(write(tmp_path / name, text).parent) == [], name


def nested(levels: int) -> dict:
    """A notebook whose JSON nests ``levels`` deep, in its metadata."""
    deep: dict = {}
    for _ in range(levels - 3):  # the innermost, the metadata and the notebook are three
        deep = {"a": deep}
    return {"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {"deep": deep}}


def test_json_nested_deeper_than_the_bound_is_refused_before_python_gives_up_on_it(tmp_path):
    assert submission.problems(write(tmp_path / "at", json.dumps(nested(MAX_NESTING))).parent) == []
    why = [f"02-softmax-masking.ipynb nests its JSON more than {MAX_NESTING} levels deep (a "
           "lesson's notebook, graded, nests 8)"]  # fmt: skip
    for levels in (MAX_NESTING + 1, 900):  # 900: nbgrader's steps raised RecursionError
        text = json.dumps(nested(levels))
        assert submission.problems(write(tmp_path / str(levels), text).parent) == why
    deeper = '{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"  # past Python's decoder
    assert submission.problems(write(tmp_path / "decoder", deeper).parent) == why


def test_only_the_notebooks_grading_reads_are_bounded(tmp_path):
    folder = tmp_path / "alice" / "02-softmax-masking"
    write(folder, new_notebook(cells=[new_code_cell("x = 1")]))
    scratch = new_notebook(
        cells=[new_code_cell("") for _ in range(MAX_CELLS + 1)]
    )  # nbgrader skips it
    (folder / "scratch.ipynb").write_text(nbformat.writes(scratch), encoding="utf-8")
    assert submission.problems(folder, folder.parent, ["02-softmax-masking"]) == []
    assert "scratch.ipynb holds 1,001 cells" in submission.problems(folder, folder.parent)[0]


def test_attn_grade_check_refuses_what_grading_refuses_in_the_same_words(tmp_path):
    path = write(
        tmp_path / "02-softmax-masking",
        new_notebook(cells=[new_code_cell("") for _ in range(1001)]),
    )
    (why,) = submission.problems(path.parent)
    with pytest.raises(notebook.NotebookError, match="would not be graded") as error:
        notebook.read(path)
    assert str(error.value) == f"{path} would not be graded: {why}"
    done = subprocess.run([str(BIN / "attn-grade"), "check", str(path), "--json", "--no-record"],
                          env=env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout) == {"notebook": str(path), "passed": False,
                                       "error": str(error.value)}  # fmt: skip


@pytest.mark.parametrize("source", TOO_DEEP, ids=["unary", "sum", "calls"])
def test_code_too_deep_for_pythons_parser_is_a_cell_that_does_not_parse(source):
    with pytest.raises((MemoryError, RecursionError)):
        compile(source, "cell", "exec")  # as the kernel meets it
    assert scoring.parsed(source) is None
    assert scoring.hidden_calls(0, source + "\ncheck('softmax', softmax)") == []
    assert scoring.copied_from_attnlib([source], "softmax") is None
    assert notebook.setup_only(source) == "" and notebook.changed_names(source) == set()


def test_the_recursive_walks_never_meet_a_tree_deeper_than_the_bound():
    def softmax_nested(depth: int) -> str:
        return f"def softmax(x, axis=-1):\n    return {'-' * depth}x\n"

    # 900 levels parse (and compile), but took the copy check into a RecursionError
    deep = softmax_nested(900)
    compile(deep, "cell", "exec")
    assert scoring.copied_from_attnlib([deep], "softmax") is None
    assert notebook.setup_only(deep) == "" and notebook.changed_names(deep) == set()
    # just inside the bound, the walks run and find the definition
    inside = softmax_nested(scoring.MAX_DEPTH - 5)
    assert not scoring.deeper_than(scoring.parsed(inside), scoring.MAX_DEPTH)
    assert notebook.changed_names(inside) == {"softmax"}
    assert "def softmax" in notebook.setup_only(inside)
    assert scoring.copied_from_attnlib([inside], "softmax") is None  # not attnlib's, and no error


def test_the_lessons_and_the_library_nest_far_less_deep_than_the_bound():
    sources = [p.read_text(encoding="utf-8") for p in REPO.glob("attnlib/**/*.py")]
    for path in LESSON_NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        sources += [c.source for c in nb.cells if c.cell_type == "code"]
    trees = [tree for tree in map(scoring.parsed, sources) if tree is not None]
    assert len(trees) > 300
    assert not any(scoring.deeper_than(tree, scoring.MAX_DEPTH // 4) for tree in trees)
    name = ast.parse("x")  # Module, Expr, Name, its Load
    assert scoring.deeper_than(name, 3) and not scoring.deeper_than(name, 4)


def beyond_each_bound() -> dict[str, nbformat.NotebookNode]:
    """A notebook beyond each bound, one bound each (as nbformat reads it)."""
    big = new_notebook(cells=[new_code_cell("print('o' * 2**24)")])
    big.cells[0].outputs = [nbformat.v4.new_output("stream", text="o" * MAX_NOTEBOOK_BYTES)]
    deep = nbformat.from_dict(nested(MAX_NESTING + 1))
    return {
        "file": big,
        "nesting": deep,
        "cells": new_notebook(cells=[new_code_cell("") for _ in range(MAX_CELLS + 1)]),
        "cell": new_notebook(cells=[new_code_cell("x = 1\n" * (MAX_CELL_SOURCE // 6 + 1))]),
        "source": new_notebook(
            cells=[new_markdown_cell("n" * MAX_CELL_SOURCE) for _ in range(16)]
            + [new_code_cell("x")]
        ),
    }


@pytest.mark.parametrize("bound", beyond_each_bound())
def test_validate_refuses_what_grading_refuses_in_the_same_words(tmp_path, bound):
    """nbgrader's Validate gets the notebook read, not its file: its first step
    (``validation.CheckBounds``) measures it as Jupyter saves it, and finds what grading
    finds in the file, named "the notebook"; a notebook within the bounds goes on, untouched."""
    from autograder.validation import CheckBounds

    path = write(tmp_path / bound, beyond_each_bound()[bound])
    (why,) = submission.notebook_problems(path)
    nb = nbformat.read(path, as_version=4)
    assert submission.saved_problems(nb, "the notebook") == [
        why.replace("02-softmax-masking.ipynb", "the notebook")
    ]
    with pytest.raises(submission.Refused) as error:
        CheckBounds().preprocess(nb, {})
    said = str(error.value)  # on lines of its own, wrapped for the button's box
    assert said.startswith("\n") and max(map(len, said.splitlines())) <= CheckBounds.WIDTH
    assert " ".join(said.split()) == "This notebook would not be graded: " + why.replace(
        "02-softmax-masking.ipynb", "the notebook"
    )
    within = nbformat.read(REPO / "lessons" / "02-softmax-masking" / "02-softmax-masking.ipynb", 4)
    assert CheckBounds().preprocess(within, {}) == (within, {})


def with_version(major, minor) -> str:
    return json.dumps({"nbformat": major, "nbformat_minor": minor, "metadata": {}, "cells": []})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "5", None, 4.0], ids=repr)
def test_a_format_version_that_is_not_a_whole_number_is_refused_with_a_line_saying_so(
    tmp_path, value
):
    """nbformat stops on such a notebook with a bare ``AssertionError`` (or reads ``4.0`` as no
    version it knows): the student would get an error naming nothing."""
    path = write(tmp_path / "minor", with_version(4, value))
    why = (f"02-softmax-masking.ipynb gives nbformat_minor as {json.dumps(value)}, where a "
           "notebook gives a whole number (Jupyter writes nbformat 4, nbformat_minor 5)"
           )  # fmt: skip
    assert submission.problems(path.parent) == [why]
    with pytest.raises(notebook.NotebookError) as error:
        notebook.read(path)
    assert str(error.value) == f"{path} would not be graded: {why}"
    major = write(tmp_path / "major", with_version(value, 5))
    assert "gives nbformat as" in submission.problems(major.parent)[0]
    for whole in (5, 0, True):  # what nbformat reads
        assert (
            submission.problems(write(tmp_path / str(whole), with_version(4, whole)).parent) == []
        )


def test_a_notebook_that_is_no_regular_file_is_told_so_and_nothing_about_outputs(tmp_path):
    import os

    folder = tmp_path / "02-softmax-masking"
    folder.mkdir()
    os.mkfifo(folder / "02-softmax-masking.ipynb")  # opened without blocking, never read
    assert submission.notebook_problems(folder / "02-softmax-masking.ipynb") == [
        "02-softmax-masking.ipynb is not a regular file"
    ]
