"""The copy check (``autograder.scoring.copied_from_attnlib``) judges each notebook by its own
cells, whichever notebooks a worker graded before, and keeps no more than two notebooks' parses."""

from __future__ import annotations

import pytest
from hostile import _copied_softmax
from test_grade_students import student_notebook

from autograder import scoring
from autograder.engine import code_sources

LESSON = "02-softmax-masking"
pytestmark = pytest.mark.lesson02


def test_a_copy_is_named_and_the_next_notebook_is_judged_by_its_own_cells():
    honest = code_sources(student_notebook(LESSON, {}))
    copier = [*honest, _copied_softmax()]  # pasted at the end: the last definition counts
    renamed = [*honest, _copied_softmax().replace("def softmax(", "def softmax_copy(")]
    for sources, copied in ((copier, True), (honest, False), (renamed, False), (copier, True)):
        found = scoring.copied_from_attnlib(sources, "softmax")
        assert bool(found) is copied, (found, copied)
        assert found is None or "attnlib.numpy.softmax" in found
        assert scoring.copied_from_attnlib(sources, "masked_softmax") is None
    assert scoring._definitions.cache_info().currsize <= 2
