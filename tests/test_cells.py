"""Course cells changed by accident are set back the same way by every judge (autograder/cells.py).

The self-check repairs a notebook from the tags it carries (:func:`autograder.cells.repair`);
grading rebuilds every tag from the gradebook (``RestoreCells``). On a notebook nbgrader's own
steps can grade, the course's steps give exactly what nbgrader's give; on the accidents they
fail (tests/hostile.py ``ACCIDENTS``, graded both ways in tests/test_grade_hostile.py), the
course's grade them.
"""

from __future__ import annotations

import copy
import warnings

import nbformat
import pytest
from course import LESSON_IDS, REPO, make_course
from nbconvert.exporters import NotebookExporter
from nbgrader.preprocessors import DeduplicateIds, OverwriteCells
from test_grade_students import submit
from traitlets.config.loader import PyFileConfigLoader

from autograder import cells
from autograder.nbgrader_plugin import SANITIZE_STEPS

LESSON = "02-softmax-masking"


def release(lesson: str = LESSON) -> nbformat.NotebookNode:
    return nbformat.read(REPO / "lessons" / lesson / f"{lesson}.ipynb", as_version=4)


def tagged(nb, grade_id: str) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if cells.grade_id_of(c) == grade_id]


def test_of_copies_the_last_keeps_the_tag_and_the_others_become_ordinary_cells():
    nb = release()
    (index,) = tagged(nb, "softmax")
    first, second = copy.deepcopy(nb.cells[index]), copy.deepcopy(nb.cells[index])
    first.id, second.id = "copy-1", "copy-2"
    second.source = "softmax = None  # the learner's latest"
    nb.cells[index + 1 : index + 1] = [first, second]
    notes = cells.deduplicate(nb)
    assert tagged(nb, "softmax") == [index + 2]  # the last copy
    assert nb.cells[index + 2].source == "softmax = None  # the learner's latest"
    assert all("nbgrader" not in nb.cells[i].metadata for i in (index, index + 1))
    assert notes == [
        "cell softmax appears 3 times (a copy keeps nbgrader's label of the original): the last "
        "copy counts as that cell, the others run as ordinary cells; delete the copies you do not "
        "need"
    ]
    nbformat.validate(nb)


def test_a_tag_without_a_grade_id_is_dropped_and_says_nothing():
    nb = release()
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "points": 50}
    nb.cells[1].metadata["nbgrader"] = {"grade_id": 7, "locked": True}
    assert cells.deduplicate(nb) == []
    assert "nbgrader" not in nb.cells[0].metadata and "nbgrader" not in nb.cells[1].metadata


@pytest.mark.parametrize("recorded", [True, False])  # a release's tag records it; a source's not
def test_a_course_cell_gets_back_its_type(recorded):
    nb = release()
    (index,) = tagged(nb, "answer_q1")
    cell = nb.cells[index]
    cell.cell_type = "markdown"
    del cell["outputs"], cell["execution_count"]
    if not recorded:
        del cell.metadata["nbgrader"]["cell_type"]
    notes = cells.restore_types(nb)
    assert cell.cell_type == "code" and cell.outputs == [] and cell.execution_count is None
    assert cell.source == release().cells[index].source
    assert notes == [
        "cell answer_q1 was turned into a markdown cell: it runs as the code cell the lesson "
        "made it; turn it back (select it and press Y) to see in JupyterLab what grading sees"
    ]
    nbformat.validate(nb)


@pytest.mark.parametrize("lesson", LESSON_IDS)
def test_an_untouched_notebook_is_left_as_it_is(lesson):
    nb = release(lesson)
    assert cells.repair(nb) == [] and nb == release(lesson)


# ---------------------------------------------------------------------------------------------
# grading: the gradebook's tags


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("cells-course"), LESSON_IDS)


def sanitized(course, lesson: str, nb, steps):
    """``nb`` submitted by ada and put through ``steps`` as nbconvert runs them."""
    path = submit(course, lesson, "ada", nb)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    info = {"student": "ada", "assignment": lesson, "notebook": lesson,
            "db_url": f"sqlite:///{course / 'gradebook.db'}"}  # fmt: skip
    resources = {"nbgrader": info, "metadata": {"path": str(path.parent)}}
    exporter = NotebookExporter(config=config)
    for step in steps:
        exporter.register_preprocessor(step, enabled=True)
    return exporter._preprocess(copy.deepcopy(nb), resources)[0]


NBGRADERS = [DeduplicateIds if s.__name__ == "Deduplicate" else
             OverwriteCells if s.__name__ == "RestoreCells" else s
             for s in SANITIZE_STEPS]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSON_IDS)
def test_where_nbgraders_steps_grade_a_notebook_the_courses_make_the_same_of_it(course, lesson):
    nb = release(lesson)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked"))
    test.source = "pass  # the learner's own 'test'"  # nbgrader sets these back as well
    test.metadata["nbgrader"]["points"] = 100
    ours = sanitized(course, lesson, nb, SANITIZE_STEPS)
    assert ours == sanitized(course, lesson, nb, NBGRADERS)
    assert "the learner's own" not in nbformat.writes(ours)


@pytest.mark.slow
def test_a_tag_is_rebuilt_from_the_gradebook_not_patched(course):
    nb = release()
    (index,) = tagged(nb, "test_softmax")
    untouched = sanitized(course, LESSON, release(), NBGRADERS).cells[index]
    tag = nb.cells[index].metadata["nbgrader"]
    tag.update(grade=False, locked=False, points=200, checksum="0" * 32, solution=True)
    nb.cells[index].source = "pass"
    with pytest.raises(RuntimeError, match="Inconsistent checksums"):  # nbgrader's gives up
        sanitized(course, LESSON, nb, NBGRADERS)
    ours = sanitized(course, LESSON, nb, SANITIZE_STEPS)
    assert ours.cells[index].metadata["nbgrader"] == untouched.metadata["nbgrader"]
    assert ours.cells[index].source == untouched.source


@pytest.mark.slow
def test_a_missing_test_cell_whose_answer_cell_is_missing_too_goes_after_the_last_one_left(course):
    nb = release()
    answer, test = tagged(nb, "causal_mask")[0], tagged(nb, "test_causal_mask")[0]
    before = tagged(nb, "test_softmax")[0]  # the nearest earlier course cell left
    del nb.cells[test], nb.cells[answer]
    with pytest.raises(KeyError):  # nbgrader's looks for the answer cell, to put it after
        sanitized(course, LESSON, nb, NBGRADERS)
    ours = sanitized(course, LESSON, nb, SANITIZE_STEPS)
    assert tagged(ours, "test_causal_mask") == [before + 1]
    nb = release()
    nb.cells = [c for c in nb.cells if "nbgrader" not in c.metadata]  # every course cell gone
    ours = sanitized(course, LESSON, nb, SANITIZE_STEPS)
    restored = [cells.grade_id_of(c) for c in ours.cells[len(nb.cells) :]]
    assert restored == [cells.grade_id_of(c) for c in release().cells
                        if c.metadata.get("nbgrader", {}).get("grade")]  # fmt: skip


@pytest.mark.slow
def test_an_unknown_grade_id_is_named_to_the_learner_cut_short(course):
    from autograder.nbgrader_plugin import RestoreCells

    nb = release()
    (index,) = tagged(nb, "test_softmax")
    nb.cells[index].metadata["nbgrader"]["grade_id"] = "mine-" + "x" * 10_000
    path = submit(course, LESSON, "ada", nb)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    info = {"student": "ada", "assignment": LESSON, "notebook": LESSON,
            "db_url": f"sqlite:///{course / 'gradebook.db'}"}  # fmt: skip
    step = RestoreCells(config=config)
    done, _ = step(nb, {"nbgrader": info, "metadata": {"path": str(path.parent)}})
    (note, put_back) = step.notes
    assert note.startswith("a cell was labelled mine-" + "x" * 55 + " for nbgrader,"), note
    assert put_back == "cell test_softmax was missing: the lesson's was put back and graded"
    (answer,) = tagged(done, "softmax")  # the nearest earlier course cell
    assert tagged(done, "test_softmax") == [answer + 1]
    assert "nbgrader" not in done.cells[answer + 2].metadata  # the renamed one, now ordinary
    assert done.cells[answer + 2].source == release().cells[index].source
    ids = [c.get("id") for c in done.cells]  # the put-back cell has an id of its own (nbformat
    assert all(ids) and len(set(ids)) == len(ids)  # 4.5), not one nbformat makes up when writing
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even nbformat's MissingIDFieldWarning
        nbformat.validate(done)
