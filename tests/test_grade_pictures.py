"""Grading workers draw a lesson's opening pictures once, before they fork."""

import pytest
from course import REPO

from autograder.executor import _is_picture, picture_cells

pytestmark = pytest.mark.lesson02


def test_picture_cells_are_found_in_the_courses_source_notebooks():
    cells = picture_cells(REPO, "02-softmax-masking")
    assert cells and all("attnlib.viz" in c for c in cells)
    assert picture_cells(REPO, "no-such-lesson") == ()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from attnlib.viz import MaskToggle\n\nMaskToggle()", True),
        ("from attnlib.viz import ComplexityExplorer\nComplexityExplorer(n=4096, dtype='float16')",
         True),
        ("from attnlib.viz import HeadExplorer\nHeadExplorer(w_heads)", False),  # learner data
        ("from attnlib.viz import MaskToggle\nMaskToggle()\nprint(softmax)", False),
        ("import os\nos.system('true')", False),
        ("MaskToggle(", False),
    ],
)  # fmt: skip
def test_only_literal_picture_cells_qualify(source, expected):
    assert _is_picture(source) is expected
