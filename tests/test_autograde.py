"""Real nbgrader grades every lesson: full marks for the solutions, zero for a blank release.

A scratch course is built from this repository with `nbgrader generate_assignment`; for each
lesson, student `alice` submits the source notebooks (the solutions) and `bob` submits the
release notebooks untouched. `nbgrader autograde` must finish, give alice every point and bob
none, and write both to the gradebook. In lesson 02, `carol` answers correctly in ways that make
NumPy print RuntimeWarnings to stderr, which plain nbgrader punishes in a test cell: she must
keep every point too.
"""

import re
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest
from course import LESSON_IDS, REPO, figures, make_course, nbgrader
from nbgrader.api import Gradebook

from attnlib import checks

# Correct answers written the way the lesson warns about, but fixed up afterwards: -inf, then
# nan_to_num. Fully masked rows make NumPy warn ("invalid value encountered") on stderr. Like every
# answer, they keep the input dtype (the visible tests check float32 in, float32 out).
WARNING_ANSWERS = {
    "masked_softmax": """def masked_softmax(scores, mask=None):
    scores = np.asarray(scores)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
""",
    "softmax": """def softmax(x, axis=-1):
    import sys
    x = np.asarray(x)
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


LESSON06 = "06-build-and-train"
# Answers that take the exercise from the course's own implementation, which the lesson's figures
# need (`view.DEMOS`: its notebook runs twice while graded, the verdicts without those modules):
# lesson → grade_id → source. Every one must earn nothing, and every other cell its points.
_AS_TENSORS = """import numpy as np
import torch
import attnlib.torch as _at


def _tensors(*arrays):  # NumPy arrays (or None) as tensors, in the dtype NumPy would compute in
    dtype = np.result_type(*(a for a in arrays if a is not None and np.asarray(a).dtype != bool))
    return [None if a is None else torch.as_tensor(np.asarray(a, dtype=bool
            if np.asarray(a).dtype == bool else dtype)) for a in arrays]


"""
DELEGATES = {
    "03-self-cross": {
        "self_attention": _AS_TENSORS + (
            "def self_attention(X, W_q, W_k, W_v, mask=None):\n"
            "    out, w = _at.self_attention(*_tensors(X, W_q, W_k, W_v, mask))\n"
            "    return out.numpy(), w.numpy()\n"),
        "cross_attention": _AS_TENSORS + (
            "def cross_attention(Y, H, W_q, W_k, W_v, mask=None):\n"
            "    out, w = _at.cross_attention(*_tensors(Y, H, W_q, W_k, W_v, mask))\n"
            "    return out.numpy(), w.numpy()\n"),
        "sinusoidal_encoding": _AS_TENSORS + (
            "def sinusoidal_encoding(T, d_model):\n"
            "    return _at.sinusoidal_encoding(T, d_model, dtype=torch.float64).numpy()\n"),
    },
    "04-multi-head": {
        "split_heads": _AS_TENSORS + (
            "def split_heads(X, num_heads):\n"
            "    return _at.split_heads(*_tensors(X), num_heads).numpy()\n"),
        "merge_heads": _AS_TENSORS + (
            "def merge_heads(X):\n"
            "    return _at.merge_heads(*_tensors(X)).numpy()\n"),
        "multi_head_attention": _AS_TENSORS + (
            "def multi_head_attention(X_q, X_kv, W_q, W_k, W_v, W_o, num_heads, mask=None):\n"
            "    *arrays, mask = _tensors(X_q, X_kv, W_q, W_k, W_v, W_o, mask)\n"
            "    out, w = _at.multi_head_attention(*arrays, num_heads, mask)\n"
            "    return out.numpy(), w.numpy()\n"),
    },
    LESSON06: {  # the course's GPT, which the lesson trains, is built from these
        "CausalSelfAttention": (
            "import importlib\n"
            "CausalSelfAttention = importlib.import_module('attnlib.torch.gpt').GPTAttention\n"),
        "cached_attention": "from attnlib.torch.decoding import cached_attention\n",
        "RepairedBlock": (
            "from attnlib.torch.gpt import Block\n\n\n"
            "class RepairedBlock(BuggyBlock):\n"
            "    def attention(self, z):\n"
            "        layer = Block(z.shape[-1], self.n_heads).attn.to(z.dtype)\n"
            "        layer.load_state_dict(self.attn.state_dict())\n"
            "        return layer(z, need_weights=True)\n"),
    },
}  # fmt: skip


def with_answers(notebook: Path, target: Path, answers: dict[str, str]) -> None:
    """Copy ``notebook`` to ``target`` with the solution cells of ``answers`` replaced."""
    nb = nbformat.read(notebook, as_version=4)
    replaced = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
            replaced.add(grade_id)
    assert replaced == set(answers), f"{notebook.name} has no cells {set(answers) - replaced}"
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
    for lesson in set(DELEGATES) & set(LESSON_IDS):
        target = root / "submitted" / "dave" / lesson
        target.mkdir(parents=True)
        for notebook in (root / "solutions" / lesson).glob("*.ipynb"):
            with_answers(notebook, target / notebook.name, DELEGATES[lesson])
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
def test_every_cell_of_the_solutions_runs_while_graded(course, autograded, lesson):
    """Graded, a right notebook shows what it shows its learner in JupyterLab: no cell raises
    (a figure made with the course's own implementation of the lesson's exercises gets it in the
    demonstrations' run, ``view.DEMOS``, instead of an error in every student's feedback), and a
    progress bar shows its last state, not every state it drew on a line of its own."""
    result = autograded(lesson)
    assert result.returncode == 0, f"nbgrader autograde {lesson} failed:\n{result.stderr[-3000:]}"
    raised = [
        line for line in failing_cells(course, lesson, "alice") if ": wrote to stderr: " not in line
    ]
    assert not raised, raised
    for path in (course / "autograded" / "alice" / lesson).glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            for out in cell.get("outputs", []):
                if out.output_type == "stream":
                    assert not re.search(r"\r[^\n]", out.text), (cell.source[:60], out.text[:300])


@pytest.mark.parametrize("lesson", lesson_params())
def test_no_figure_of_a_right_notebook_is_cut_at_its_edges(course, autograded, lesson):
    """Every image a graded right notebook shows has a frame of bare background: nothing drawn
    reaches its edge. Lesson 02 shows its figures at the size they are made instead of cropped to
    what they hold (cropping lays a figure out once more), so its heatmaps set their own margins:
    a label pushed past them would be cut off, and show here."""
    assert autograded(lesson).returncode == 0
    (path,) = (course / "autograded" / "alice" / lesson).glob("*.ipynb")
    shown = figures(path)
    assert shown, f"{lesson} shows no figure"
    for first_line, pixels in shown:
        frame = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
        colours = np.unique(frame, axis=0)
        assert len(colours) == 1, (lesson, first_line, pixels.shape, colours[:4].tolist())


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


def delegate_params():
    return [
        pytest.param(lesson, marks=[pytest.mark.slow, getattr(pytest.mark, f"lesson{lesson[:2]}")])
        for lesson in sorted(set(DELEGATES) & set(LESSON_IDS))
    ]


@pytest.mark.parametrize("lesson", delegate_params())
def test_answers_taken_from_the_implementations_the_figures_need_earn_nothing(
    course, autograded, lesson
):
    result = autograded(lesson)
    assert result.returncode == 0, result.stderr[-3000:]
    exercises = {exercise.name for exercise in checks.LESSONS[lesson]}
    assert set(DELEGATES[lesson]) <= exercises
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for cell in gradebook.find_notebook(lesson, lesson).grade_cells:
            name = cell.name.removeprefix("test_")
            if name not in exercises:  # a quiz answer computed with a delegating function
                continue
            grade = gradebook.find_grade(cell.name, lesson, lesson, "dave")
            taken = name in DELEGATES[lesson]
            assert grade.score == (0 if taken else cell.max_score), (cell.name, grade.score)


@pytest.mark.parametrize(
    "name, source",
    [
        pytest.param(name, source, marks=getattr(pytest.mark, f"lesson{lesson[:2]}"))
        for lesson in ("03-self-cross", "04-multi-head")
        for name, source in DELEGATES[lesson].items()
    ],
)
def test_those_answers_would_pass_where_the_implementations_are(name, source):
    """The attack above is real: with the course's implementations at hand (the learner's own
    kernel, the demonstrations' run) these answers pass their checks."""
    names = {}
    exec(source, names)
    outcome = checks.check(name, names[name])
    assert outcome.passed, outcome.feedback()


@pytest.mark.slow
@pytest.mark.lesson06
@pytest.mark.skipif(LESSON06 not in LESSON_IDS, reason="lesson 06 is not in solutions/")
def test_lesson06s_figures_are_drawn_while_graded(course, autograded):
    result = autograded(LESSON06)
    assert result.returncode == 0, result.stderr[-3000:]
    # The course's model is there for the figures: alice's training cells drew their plots, each
    # one figure in its last state, as in JupyterLab (the plot redraws itself while it trains).
    (path,) = (course / "autograded" / "alice" / LESSON06).glob("*.ipynb")
    cells = nbformat.read(path, as_version=4).cells
    trained = [c for c in cells if c.cell_type == "code" and "LossPlot(" in c.source]
    assert len(trained) == 2
    for cell in trained:
        plots = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(plots) == 1, f"{len(plots)} loss plots under {cell.source[:60]!r}"


def training_lessons() -> list:
    """The lessons that train a model, and train it briefly when graded (``GRADING``)."""

    def trains(lesson: str) -> bool:
        return "GRADING = " in (REPO / "solutions" / lesson / f"{lesson}.ipynb").read_text()

    return [param for param in lesson_params() if trains(param.values[0])]


@pytest.mark.parametrize("lesson", training_lessons())
def test_a_lesson_that_trains_says_so_when_its_graded_run_is_brief(course, autograded, lesson):
    """The grader checks functions, not models: a lesson that trains one trains it briefly when
    graded, and the learner reading the graded notebook is told that the figures and numbers
    come from a brief run, unlike those the text describes."""
    assert autograded(lesson).returncode == 0
    (path,) = (course / "autograded" / "alice" / lesson).glob("*.ipynb")
    shown = [out.text for cell in nbformat.read(path, as_version=4).cells
             for out in cell.get("outputs", []) if out.output_type == "stream"]  # fmt: skip
    assert any("(grading run: " in text for text in shown), lesson
