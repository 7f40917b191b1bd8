"""Real nbgrader grades every lesson: full marks for the solutions, zero for a blank release.

A scratch course is built from this repository with `nbgrader generate_assignment`; for each
lesson, student `alice` submits the source notebooks (the solutions) and `bob` submits the
release notebooks untouched. `nbgrader autograde` must finish, give alice every point and bob
none, and write both to the gradebook. In lesson 02, `carol` answers correctly in ways that make
NumPy print RuntimeWarnings to stderr, which plain nbgrader punishes in a test cell: she must
keep every point too.
"""

import shutil
from pathlib import Path

import nbformat
import pytest
from course import REPO, make_course, nbgrader
from nbgrader.api import Gradebook

LESSON_IDS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())

# Correct answers written the way the lesson warns about, but fixed up afterwards: -inf, then
# nan_to_num. Fully masked rows make NumPy warn ("invalid value encountered") on stderr.
WARNING_ANSWERS = {
    "masked_softmax": """def masked_softmax(scores, mask=None):
    scores = np.asarray(scores, dtype=float)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
""",
    "softmax": """def softmax(x, axis=-1):
    import sys
    x = np.asarray(x, dtype=float)
    print("softmax: using log-sum-exp", file=sys.stderr)
    top = np.max(x, axis=axis, keepdims=True)
    return np.exp(x - top - np.log(np.exp(x - top).sum(axis=axis, keepdims=True)))
""",
}


def with_warning_answers(notebook: Path, target: Path) -> None:
    """Copy ``notebook`` with the solutions in WARNING_ANSWERS swapped in."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        for name, source in WARNING_ANSWERS.items():
            if f"def {name}(" in cell.source:
                cell.source = source
    nbformat.write(nb, target)


def lesson_params():
    return [
        pytest.param(lesson, marks=[pytest.mark.slow, getattr(pytest.mark, f"lesson{lesson[:2]}")])
        for lesson in LESSON_IDS
    ]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = make_course(tmp_path_factory.mktemp("graded-course"), LESSON_IDS)
    for lesson in LESSON_IDS:
        for student, folder in (("alice", root / "solutions"), ("bob", root / "lessons")):
            target = root / "submitted" / student / lesson
            target.mkdir(parents=True)
            for notebook in (folder / lesson).glob("*.ipynb"):
                shutil.copy(notebook, target / notebook.name)
    if "02-softmax-masking" in LESSON_IDS:
        target = root / "submitted" / "carol" / "02-softmax-masking"
        target.mkdir(parents=True)
        for notebook in (root / "solutions" / "02-softmax-masking").glob("*.ipynb"):
            with_warning_answers(notebook, target / notebook.name)
    return root


@pytest.fixture(scope="module")
def autograded(course):
    """Autograde a lesson once (on first use) and keep nbgrader's output."""
    done = {}

    def run(lesson):
        if lesson not in done:
            done[lesson] = nbgrader(course, "autograde", lesson, "--force")
        return done[lesson]

    return run


def score(course: Path, lesson: str, student: str) -> tuple[float, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(lesson, student)
        return submission.score, submission.max_score


def failing_cells(course: Path, lesson: str, student: str) -> list[str]:
    """The graded cells of an autograded notebook that raised, with their error lines."""
    found = []
    for path in sorted((course / "autograded" / student / lesson).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            for out in cell.get("outputs", []):
                if out.output_type == "error":
                    found.append(f"{path.name}:{grade_id}: {out.ename}: {out.evalue}")
                elif out.output_type == "stream" and out.name == "stderr":
                    found.append(f"{path.name}:{grade_id}: wrote to stderr: {out.text[:300]}")
    return found


@pytest.mark.parametrize("lesson", lesson_params())
def test_solutions_get_full_marks(course, autograded, lesson):
    result = autograded(lesson)
    assert result.returncode == 0, f"nbgrader autograde {lesson} failed:\n{result.stderr[-3000:]}"
    got, total = score(course, lesson, "alice")
    assert total > 0, f"{lesson} has no graded cells"
    assert got == total, (
        f"{lesson}: the solutions score {got}/{total}; failing cells:\n"
        + "\n".join(failing_cells(course, lesson, "alice"))
    )


@pytest.mark.parametrize("lesson", lesson_params())
def test_an_untouched_release_scores_zero_and_the_grader_survives(course, autograded, lesson):
    result = autograded(lesson)
    assert result.returncode == 0, f"nbgrader autograde {lesson} failed:\n{result.stderr[-3000:]}"
    got, total = score(course, lesson, "bob")
    assert (got, total) == (0, score(course, lesson, "alice")[1])
    assert list((course / "autograded" / "bob" / lesson).glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.lesson02
@pytest.mark.skipif("02-softmax-masking" not in LESSON_IDS, reason="lesson 02 is not in solutions/")
def test_correct_answers_that_write_to_stderr_keep_full_marks(course, autograded):
    result = autograded("02-softmax-masking")
    assert result.returncode == 0, result.stderr[-3000:]
    autograded_nb = course / "autograded" / "carol" / "02-softmax-masking"
    sources = "".join(
        c.source for p in autograded_nb.glob("*.ipynb") for c in nbformat.read(p, 4).cells
    )
    assert "np.nan_to_num(e / e.sum" in sources  # her answers really were graded
    got, total = score(course, "02-softmax-masking", "carol")
    assert got == total, "\n".join(failing_cells(course, "02-softmax-masking", "carol"))
