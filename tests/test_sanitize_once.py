"""The course's sanitizing step is nbgrader's sanitizing preprocessors, run once per notebook.

``Sanitize`` runs nbgrader's steps (``SANITIZE_STEPS``) in order, validating the notebook as
submitted and after the last step (``trusted_pipeline``). ``attn-grade batch`` sanitizes each
notebook ahead of nbgrader's loop to send it to its workers; within ``sanitizing_ahead``
nbgrader's own pass then takes that result instead of sanitizing again — only for exactly the
same notebook, and only after checking the submission's folder again.
"""

from __future__ import annotations

import copy
import os

import nbformat
import pytest
from course import make_course
from nbconvert.exporters import NotebookExporter
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from test_grade_students import student_notebook, submit
from traitlets.config.loader import PyFileConfigLoader

from autograder import nbgrader_plugin, submission
from autograder.nbgrader_plugin import SANITIZE_STEPS, Sanitize, sanitize_ahead, sanitizing_ahead

LESSON = "01-scoring"
pytestmark = [pytest.mark.lesson01]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = make_course(tmp_path_factory.mktemp("sanitize-course"), [LESSON])
    # a learner who edited a test cell and left outputs behind: the steps have work to do
    nb = student_notebook(LESSON, {})
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and
                not c.metadata["nbgrader"].get("solution"))  # fmt: skip
    test.source = "pass  # the learner's own 'test'"
    test.outputs = [nbformat.v4.new_output("stream", text="noise\n")]
    submit(root, LESSON, "ada", nb)
    return root


@pytest.fixture
def config(course):
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def read(course):
    """The submission as nbgrader reads it, and nbgrader's resources for it."""
    path = course / "submitted" / "ada" / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(path, as_version=4)
    info = {"student": "ada", "assignment": LESSON, "notebook": LESSON,
            "db_url": f"sqlite:///{course / 'gradebook.db'}"}  # fmt: skip
    return nb, {"nbgrader": info, "metadata": {"path": str(path.parent)}}


def through_nbconvert(config, steps, nb, resources):
    """What nbconvert's exporter makes of ``nb`` with ``steps`` as its preprocessor list."""
    exporter = NotebookExporter(config=config)
    for step in steps:
        exporter.register_preprocessor(step, enabled=True)
    return exporter._preprocess(nb, resources)[0]


def test_sanitize_is_nbgraders_steps_as_nbconvert_runs_them(course, config):
    nb, resources = read(course)
    ours, _ = Sanitize(config=config).preprocess(copy.deepcopy(nb), copy.deepcopy(resources))
    theirs = through_nbconvert(config, SANITIZE_STEPS, nb, resources)
    assert ours == theirs
    assert "the learner's own" not in nbformat.writes(ours)  # the test cell is put back


def test_a_notebook_sanitized_ahead_is_not_sanitized_again(course, config, monkeypatch):
    runs = []
    original = OverwriteCells.preprocess

    def counted(self, nb, resources):
        runs.append(1)
        return original(self, nb, resources)

    monkeypatch.setattr(OverwriteCells, "preprocess", counted)
    with sanitizing_ahead():
        ahead = sanitize_ahead(config, *read(course))
        assert len(runs) == 1
        again, _ = Sanitize(config=config).preprocess(*read(course))
    assert again is ahead and len(runs) == 1
    plain, _ = Sanitize(config=config).preprocess(*read(course))  # outside a batch: every time
    assert plain == ahead and len(runs) == 2


def test_a_notebook_that_changed_since_is_sanitized_anew(course, config):
    with sanitizing_ahead():
        ahead = sanitize_ahead(config, *read(course))
        nb, resources = read(course)
        nb.cells[-1].source += "\n# changed after the batch read it"
        again, _ = Sanitize(config=config).preprocess(nb, resources)
    assert again is not ahead and again != ahead
    assert again.cells[-1].source.endswith("# changed after the batch read it")


def test_the_folder_is_checked_again_when_the_kept_notebook_is_used(course, config):
    folder = course / "submitted" / "ada" / LESSON
    with sanitizing_ahead():
        sanitize_ahead(config, *read(course))
        os.symlink("/etc/passwd", folder / "data.txt")
        try:
            with pytest.raises(submission.Refused, match="refused"):
                Sanitize(config=config).preprocess(*read(course))
        finally:
            (folder / "data.txt").unlink()


def test_forget_drops_what_is_kept_for_a_student(course, config):
    with sanitizing_ahead() as forget:
        ahead = sanitize_ahead(config, *read(course))
        forget("someone else")
        assert Sanitize(config=config).preprocess(*read(course))[0] is ahead
        sanitize_ahead(config, *read(course))
        forget("ada")
        assert Sanitize(config=config).preprocess(*read(course))[0] is not ahead


class Break(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        nb.cells[0].cell_type = "not a cell type"
        return nb, resources


def test_a_step_that_breaks_the_notebook_fails_it(course, config, monkeypatch):
    """A step is trusted code, validated once after the last: a notebook it breaks is never
    graded, whether the steps run on their own (the batch, ahead) or in nbconvert's pass."""
    monkeypatch.setattr(nbgrader_plugin, "SANITIZE_STEPS", [*SANITIZE_STEPS[:-1], Break])
    nb, resources = read(course)
    with pytest.raises(nbformat.ValidationError):
        Sanitize(config=config).steps(copy.deepcopy(nb), copy.deepcopy(resources))
    with pytest.raises(nbformat.ValidationError):
        through_nbconvert(config, [Sanitize], nb, resources)


def test_a_notebook_invalid_as_submitted_is_refused_naming_the_place(course, config):
    """Plain nbgrader's pass: the steps' first check finds the notebook invalid as the student
    left it, so the student is told where (``notebook_format``), not a step's failure."""
    nb, resources = read(course)
    code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells[code].execution_count = "x"  # nbformat reads it (and only logs that it is invalid)
    with pytest.raises(submission.Refused) as refused:
        Sanitize(config=config).preprocess(nb, resources)
    assert str(refused.value) == (
        f"the submission of ada is refused: {LESSON}.ipynb is not a valid notebook: cell "
        f"{code + 1}'s execution_count: 'x' is not of type 'integer', 'null'"
    )
