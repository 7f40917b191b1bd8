"""lessons/ is what `make release` makes from solutions/, and both are stored clean.

If a test here fails after you edited a lesson, run `make release` (it regenerates lessons/ with
nbgrader and clears the outputs of both folders) and commit the result.
"""

from pathlib import Path

import nbformat
import pytest
from course import LESSON_IDS, make_course
from traitlets.config import Config, PyFileConfigLoader

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions"
LESSONS = REPO / "lessons"
# Markers that must never reach a learner (nbgrader's defaults, as in nbgrader_config.py).
SECRET_DELIMITERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME")


def _notebooks(folder):
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def _nbgrader_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]


def test_there_is_a_lesson_and_each_has_a_notebook():
    assert LESSON_IDS, "solutions/ holds no lesson folders"
    for lesson in LESSON_IDS:
        assert list((SOLUTIONS / lesson).glob("*.ipynb")), f"solutions/{lesson} has no notebook"


def test_nbgrader_config_makes_the_repo_root_the_course():
    config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    assert isinstance(config, Config)
    course = config.CourseDirectory
    assert Path(course.root) == REPO
    assert (course.source_directory, course.release_directory) == ("solutions", "lessons")
    assert course.course_id == "attention"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """A fresh release made by the real `nbgrader generate_assignment` in a scratch course."""
    return make_course(tmp_path_factory.mktemp("course"), LESSON_IDS) / "lessons"


def test_lessons_are_in_sync_with_solutions(regenerated):
    fresh = sorted(p.relative_to(regenerated) for p in regenerated.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(LESSONS) for p in LESSONS.rglob("*") if p.is_file())
    assert committed == fresh, "lessons/ holds other files than a fresh release: run `make release`"
    for rel in fresh:
        if rel.suffix != ".ipynb":
            assert (LESSONS / rel).read_bytes() == (regenerated / rel).read_bytes(), rel
            continue
        want, have = _nbgrader_cells(regenerated / rel), _nbgrader_cells(LESSONS / rel)
        assert len(have) == len(want), f"lessons/{rel}: cell count differs, run `make release`"
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            assert h == w, f"lessons/{rel}, cell {i} differs from a fresh release: `make release`"


def test_lessons_hold_no_solutions_or_hidden_tests():
    leaks = []
    for path in sorted(p for p in LESSONS.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        leaks += [f"{path.relative_to(REPO)}: {d}" for d in SECRET_DELIMITERS if d in text]
    assert not leaks, "\n".join(leaks)


@pytest.mark.parametrize(
    "path",
    [p.relative_to(REPO) for p in _notebooks(SOLUTIONS) + _notebooks(LESSONS)],
    ids=str,
)
def test_notebooks_are_stored_without_outputs(path):
    nb = nbformat.read(REPO / path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"{path}: cells {dirty} have outputs or execution counts; run `make release` "
        "(or `jupyter nbconvert --clear-output --inplace` on the notebook)"
    )
