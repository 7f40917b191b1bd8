"""One verdict everywhere: five ways of judging an exercise, one answer.

For every lesson, two learners: one whose every exercise is right (the source notebook's
solutions) and one whose every exercise holds a classic mistake of its own (:data:`WRONG`). Their
notebooks are what a learner has — the release, with their code in the solution cells — and each
is judged five ways:

1. the test cell, in a Jupyter kernel (Run All reaches the end: the cells are tagged
   ``raises-exception``);
2. nbgrader's Validate, as the toolbar button's handler runs it (its ``Validator`` with the
   course's config; the Run All of way 1 is the one the Validator ran, read from the notebook
   it executed: :mod:`validate_as_the_button`);
3. ``attn-grade check``;
4. ``pytest --attn-notebook``;
5. the gradebook, after ``attn-grade batch``.

The right learner passes every exercise every way (and the mastery check: its answers are the
lesson's own, computed in the notebook); the wrong one fails every exercise every way, each with
the same named mistake, and every mastery question (:data:`WRONG_ANSWER`) with the same section
to reread, and each exercise costs points in its own cell only (an
exercise that calls an earlier, wrong one of the learner's is judged with the course's version
of the earlier one in its place).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from course import BIN, REPO, env, figures, make_course
from nbformat.v4 import new_code_cell
from nbgrader.api import Gradebook, MissingEntry
from test_grade_students import submit

from attnlib import checks, quiz
from autograder import submission, view
from autograder.submission import MAX_CELL_SOURCE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]

# lesson → exercise → ([(old, new), ...] edits of its solution, the named mistake every way shows)
WRONG = {
    "01-scoring": {
        "dot_scores": ([("return Q @ np.swapaxes(K, -1, -2)", "return K @ np.swapaxes(Q, -1, -2)")],
                       "scores are transposed"),
        "scaled_dot_scores": ([("/ math.sqrt(d_k)", "/ d_k")],
                              "scaled by d_k instead of sqrt(d_k)"),
        "additive_scores": ([("np.tanh(q[..., :, None, :] + k[..., None, :, :])",
                              "(q[..., :, None, :] + k[..., None, :, :])")], "tanh is missing"),
        "cosine_scores": ([("dot_scores(Q / q_norm, K / k_norm)", "dot_scores(Q / q_norm, K)")],
                          "only the queries are normalised"),
    },
    "02-softmax-masking": {
        "softmax": ([("np.max(x, axis=axis,", "np.max(x, axis=0,"),
                     ("np.sum(e, axis=axis,", "np.sum(e, axis=0,")],
                    "normalises over the first axis"),
        "causal_mask": ([("positions[None, :] <= positions[:, None]",
                          "positions[None, :] < positions[:, None]")], "the diagonal is masked"),
        "padding_mask": ([("positions[None, :] < lengths[:, None]",
                           "positions[None, :] <= lengths[:, None]")], "off by one"),
        "masked_softmax": ([("blocked = np.where(mask, scores, -np.inf)", "blocked = scores")],
                           "the mask is ignored"),
        "attention": ([("/ math.sqrt(d_k)", "/ d_k")], "scaled by d_k instead of sqrt(d_k)"),
    },
    "03-self-cross": {
        "self_attention": ([("K = X @ np.asarray(W_k)", "K = X @ np.asarray(W_q)")],
                           "keys are projected with W_q"),
        "cross_attention": ([("K = H @ np.asarray(W_k)", "K = Y @ np.asarray(W_k)"),
                             ("V = H @ np.asarray(W_v)", "V = Y @ np.asarray(W_v)")],
                            "keys and values come from Y"),
        "hard_attention": ([("best = np.argmax(scores, axis=-1)",
                             "best = scores.shape[-1] - 1 - "
                             "np.argmax(scores[..., ::-1], axis=-1)")],
                           "ties go to the last index"),
        "sinusoidal_encoding": ([("pe[:, 0::2] = np.sin(angle)", "pe[:, 0::2] = np.cos(angle)"),
                                 ("pe[:, 1::2] = np.cos(angle[:, : d_model // 2])",
                                  "pe[:, 1::2] = np.sin(angle[:, : d_model // 2])")],
                                "sine and cosine are swapped"),
    },
    "04-multi-head": {
        "split_heads": ([("return X.transpose(0, 2, 1, 3)",
                          "return X.reshape(B, num_heads, T, d_head)")],
                        "reshape without transpose"),
        "merge_heads": ([("X = X.transpose(0, 2, 1, 3)", "X = X")], "reshape without transpose"),
        "multi_head_attention": ([("output = merge_heads(heads) @ W_o",
                                   "output = merge_heads(heads)")],
                                 "the output projection W_o is missing"),
    },
    "05-complexity": {
        "attention_flops": ([("scores = 2 * m * n * d_k", "scores = m * n * d_k"),
                             ("weighted_sum = 2 * m * n * d_v", "weighted_sum = m * n * d_v")],
                            "counts multiply-adds"),
        "score_matrix_bytes": ([("entries = batch * heads * m * n", "entries = batch * m * n")],
                               "forgets the heads"),
        "chunked_attention": ([("rescale = np.exp(running_max - new_max)",
                                "rescale = np.ones_like(new_max)")],
                              "not rescaled when a block raises the maximum"),
        "fit_exponent": ([("x = np.log(np.asarray(ns, dtype=float))",
                           "x = np.asarray(ns, dtype=float)")], "only the times are logged"),
    },
    "06-build-and-train": {
        "softmax_backward": ([("return y * (grad_y - weighted_mean)", "return y * grad_y")],
                             "sum(grad_y · y) term is missing"),
        "attention_backward": ([("dQ = (dS @ K) * scale", "dQ = dS @ K"),
                                ("dK = (dS.transpose(-2, -1) @ Q) * scale",
                                 "dK = dS.transpose(-2, -1) @ Q")],
                               "miss the 1/sqrt(d_k) factor"),
        "CausalSelfAttention": ([('torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)',
                                  "torch.softmax(scores, dim=-1)")], "there is no causal mask"),
        "check_attention": ([("    rng = np.random.default_rng(6)",
                              "    return None  # trusts every attention\n"
                              "    rng = np.random.default_rng(6)")], "catches 0 of"),
        "RepairedBlock": ([("/ math.sqrt(self.d_head)", "/ self.d_head")],
                          "still divided by d_head"),
        "cached_attention": ([("return weights @ V, (K, V)",
                               "return weights @ V, (cache if cache is not None else (K, V))")],
                             "the cache is not updated"),
        "induction_score": ([("keys = queries - period + 1", "keys = queries - period")],
                            "earlier occurrence itself"),
    },
}  # fmt: skip
LESSONS = list(WRONG)


WRONG_ANSWER = "not this"  # the wrong learner's answer to every mastery question


def question_of(grade_id: str) -> str | None:
    """The mastery question an answer cell answers (``answer_q1``, ``q1_answer``), or None."""
    found = re.search(r"(?:^|_)(q\d+)(?:_|$)", grade_id)
    return found.group(1) if found else None


def graded_name(grade_id: str) -> str:
    """The exercise or question a graded cell judges: ``test_softmax`` → ``softmax``,
    ``test_check_attention`` → ``check_attention``, ``test_q1`` and ``check_q1`` → ``q1``."""
    return re.sub(r"^(test|check)_", "", grade_id)


def learner_notebook(
    lesson: str, edits: dict, wrong_answers: bool = False
) -> nbformat.NotebookNode:
    """The release of ``lesson`` with the solution cells a learner would have written (and, with
    ``wrong_answers``, :data:`WRONG_ANSWER` to every mastery question)."""
    source = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    solved = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and wrong_answers and question_of(meta["grade_id"]):
            solved[meta["grade_id"]] = f"{question_of(meta['grade_id'])} = {WRONG_ANSWER!r}"
        elif meta.get("solution"):
            text = cell.source
            for old, new in edits.get(meta["grade_id"], ([], ""))[0]:
                assert old in text, f"{lesson}:{meta['grade_id']}: {old!r} not in the solution"
                text = text.replace(old, new)
            solved[meta["grade_id"]] = "\n".join(
                line for line in text.splitlines() if "### BEGIN SOLUTION" not in line
                and "### END SOLUTION" not in line
            )  # fmt: skip
    nb = nbformat.read(REPO / "lessons" / lesson / f"{lesson}.ipynb", as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solved:
            cell.source = solved[grade_id]
    return nb


def run(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args), cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def kernel_verdicts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Run All's verdicts in ``nb``, a notebook a kernel ran: exercise or mastery question →
    ``"✓"`` or the one line its test cell failed with.

    Run All reaches the end only if every cell that raised is tagged ``raises-exception``
    (JupyterLab and nbclient stop at any other): that is checked too.
    """
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        errors = [o for o in cell.outputs if o.output_type == "error"]
        tags = cell.metadata.get("tags", [])
        assert not errors or "raises-exception" in tags, (meta.get("grade_id"), cell.source[:200])
        if not meta.get("grade") or meta.get("solution"):
            continue
        name = graded_name(meta["grade_id"])
        if name not in checks.EXERCISES and not re.fullmatch(r"q\d+", name):
            continue
        if errors:
            (error,) = errors
            assert len(error.traceback) == 1, (name, error.traceback)  # one line, no traceback
            out[name] = f"{error.ename}: {error.evalue}"
        else:
            text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
            assert f"✓ {name}:" in text, (name, text)
            out[name] = "✓"
    return out


def validated(path: Path, course: Path) -> tuple[dict, dict[str, str]]:
    """Validate ``path`` as the button does: the Validator's results, and the verdicts of the
    Run All it made (under ``NBGRADER_EXECUTION=validate``: lesson 06 trains its models
    briefly, and every verdict is the same)."""
    executed = path.parents[1] / "validated.ipynb"  # not beside it: check copies what is
    reply = button_reply(path, course, executed)
    assert reply["success"], reply["value"]
    return reply["value"], kernel_verdicts(nbformat.read(executed, as_version=4))


def button_reply(path: Path, course: Path, executed: Path) -> dict:
    """The Validate handler's reply for ``path`` (:mod:`validate_as_the_button`)."""
    script = Path(__file__).with_name("validate_as_the_button.py")
    done = run(sys.executable, str(script), str(path), str(executed), cwd=course)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_verdicts(path: Path, course: Path) -> tuple[dict[str, str], list[str]]:
    """``attn-grade check``'s verdicts, and the problems it found running the notebook and the
    course cells it had to run whole."""
    done = run(str(BIN / "attn-grade"), "check", str(path), "--json", "--no-record", cwd=course)
    report = json.loads(done.stdout)
    lines = report["exercises"] + report["questions"]
    verdicts = {e["name"]: "✓" if e["passed"] else e["message"] for e in lines}
    return verdicts, report["problems"] + report["ran_whole"]


def pytest_verdicts(path: Path, course: Path) -> dict[str, str]:
    junit = path.with_suffix(".xml")
    run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--attn-notebook",
        str(path), f"--junitxml={junit}", cwd=course)  # fmt: skip
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        out[case.get("name")] = "✓" if failure is None else (failure.get("message") or "")
    return out


def gradebook_verdicts(course: Path, lesson: str, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(lesson, lesson, student)
        return {graded_name(g.name): g.score for g in nb.grades}


def sizes(path: Path) -> list[tuple[str, tuple[int, ...]]]:
    """The images ``path`` shows, in order: the first line of each one's cell, and its shape."""
    return [(first_line, pixels.shape) for first_line, pixels in figures(path)]


@pytest.fixture(scope="module", params=LESSONS)
def judged(request, tmp_path_factory):
    lesson = request.param
    course = make_course(tmp_path_factory.mktemp(f"verdict-{lesson[:2]}"), [lesson])
    paths = {}
    for who, edits in (("right", {}), ("wrong", WRONG[lesson])):
        nb = learner_notebook(lesson, edits, wrong_answers=who == "wrong")
        folder = course / "mine" / who / lesson
        folder.mkdir(parents=True)
        paths[who] = folder / f"{lesson}.ipynb"
        nbformat.write(nb, paths[who])
        submit(course, lesson, who, nb)
    ways = {
        "validate": lambda path: validated(path, course),
        "check": lambda path: check_verdicts(path, course),
        "pytest": lambda path: pytest_verdicts(path, course),
    }

    def batch():
        done = run(str(BIN / "attn-grade"), "batch", lesson, "--course", str(course), "--json",
                   "--workers", "1", cwd=course)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    # Every way reads its own copy and writes nothing the others read: two at a time, one a core.
    with ThreadPoolExecutor(max_workers=2) as pool:
        graded = pool.submit(batch)
        jobs = {(who, way): pool.submit(fn, path)
                for who, path in paths.items() for way, fn in ways.items()}  # fmt: skip
        found = {who: {} for who in paths}
        for (who, way), job in jobs.items():
            found[who][way] = job.result()
        graded.result()
    for who in found:
        found[who]["validate"], found[who]["kernel"] = found[who]["validate"]
        found[who]["kernel figures"] = sizes(course / "mine" / who / "validated.ipynb")
        found[who]["graded figures"] = sizes(
            course / "autograded" / who / lesson / f"{lesson}.ipynb"
        )
        found[who]["check"], found[who]["check problems"] = found[who]["check"]
        found[who]["gradebook"] = gradebook_verdicts(course, lesson, who)
    return lesson, found


def test_a_right_answer_passes_all_five_ways(judged):
    lesson, found = judged
    right = found["right"]
    for exercise in checks.LESSONS[lesson]:
        name = exercise.name
        assert right["kernel"][name] == "✓", name
        assert right["check"][name] == "✓", name
        assert right["pytest"][name] == "✓", name
        assert right["gradebook"][name] > 0, name
    for question in quiz.questions(lesson):  # and the lesson's own answers to its mastery check
        key = question.key
        assert right["kernel"][key] == "✓", (key, right["kernel"][key])
        assert right["check"][key] == "✓", (key, right["check"][key])
        assert right["pytest"][key] == "✓", (key, right["pytest"][key])
        assert right["gradebook"][key] > 0, key
    assert right["validate"] == {}, right["validate"]  # the button says "Success!"
    # nor a cell that failed, nor a course cell it had to run whole (a cell an answer needs
    # whole is tagged setup: the check then takes one round, not two)
    assert right["check problems"] == [], right["check problems"]


def test_the_graded_notebook_shows_the_figures_the_learners_kernel_drew(judged):
    """The feedback shows a learner the figures their own kernel drew (Validate's Run All), the
    same ones at the same sizes: the sandbox keeps what a notebook asks of the inline backend.
    Lesson 02 asks for its figures at the size they are made, not cropped (a cropped figure is
    laid out once more): graded, they are that size too. (An interactive explorer is graded as
    a line that names it, the sandbox's edition of ``attnlib.viz``: its picture is not compared.)"""
    lesson, found = judged
    kernel, graded = found["right"]["kernel figures"], found["right"]["graded figures"]
    assert graded, f"{lesson}: the graded notebook shows no figure"
    drawn = {first_line for first_line, _ in graded}
    assert [figure for figure in kernel if figure[0] in drawn] == graded


def fails_every_way(wrong: dict, name: str, phrase: str, test_line: str) -> None:
    """``name`` (an exercise or a question) failed every way, each saying ``phrase``; its test
    cell is the one containing ``test_line``."""
    kernel = wrong["kernel"][name]
    assert kernel.startswith(f"CheckFailed: {name}: ") and phrase in kernel, (name, kernel)
    assert phrase in wrong["check"][name], (name, wrong["check"][name])
    assert phrase in wrong["pytest"][name], (name, wrong["pytest"][name])
    assert wrong["gradebook"][name] == 0, (name, wrong["gradebook"])
    # the button lists the test cell with the error it raised, as the cell shows it: wrapped to
    # the notebook's width
    (failed,) = [cell for cell in wrong["validate"]["failed"] if test_line in cell["source"]]
    assert phrase in " ".join(failed["raw_error"].split()), (name, failed["raw_error"])


def test_a_wrong_answer_fails_all_five_ways_with_the_same_named_mistake(judged):
    lesson, found = judged
    for exercise in checks.LESSONS[lesson]:
        name = exercise.name
        fails_every_way(
            found["wrong"], name, WRONG[lesson][name][1], f'with report("{name}", {name})'
        )
    for question in quiz.questions(lesson):  # WRONG_ANSWER to each: what to reread, every way
        key = question.key
        assert not question.accepts(WRONG_ANSWER), key
        fails_every_way(found["wrong"], key, f"not right yet. Revisit: {question.topic}",
                        f'check_answer("{lesson}", "{key}")')  # fmt: skip


def test_a_notebook_grading_refuses_is_refused_in_the_same_words_by_every_way_that_reads_it(
    tmp_path,
):
    """A learner pasted a dataset into a cell of lesson 02, more than a cell may hold; every answer
    is right. Grading refuses the notebook before reading it further (``submission``'s bounds), so
    Validate, ``attn-grade check`` and ``pytest --attn-notebook`` say so before the learner
    submits, each with the line the gradebook's refusal gives, and none runs the notebook. (The
    test cells judge one exercise each, not the notebook: there, nothing changes.)"""
    lesson = "02-softmax-masking"
    course = make_course(tmp_path, [lesson])
    nb = learner_notebook(lesson, {})
    nb.cells.append(new_code_cell('data = """\n' + "0.5, " * (MAX_CELL_SOURCE // 5 + 1) + '\n"""'))
    folder = course / "mine" / "pasted" / lesson
    folder.mkdir(parents=True)
    path = folder / f"{lesson}.ipynb"
    nbformat.write(nb, path)
    submit(course, lesson, "pasted", nb)
    (why,) = submission.notebook_problems(path)
    assert why.startswith(f"cell {len(nb.cells)} of {lesson}.ipynb (it begins 'data = ") and (
        f"more than the {MAX_CELL_SOURCE:,} a cell may hold" in why
    )

    # Validate: the handler's reply, which the button shows below "There was an error running
    # the validate command:", ends with the line (wrapped); no kernel ran the notebook
    executed = tmp_path / "validated.ipynb"
    reply = button_reply(path, course, executed)
    assert not reply["success"], reply
    said = reply["value"].rsplit("autograder.submission.Refused:", 1)[1]
    assert " ".join(said.split()) == "This notebook would not be graded: " + why.replace(
        f"{lesson}.ipynb", "the notebook"
    ), reply["value"]
    assert not executed.exists()

    done = run(str(BIN / "attn-grade"), "check", str(path), "--json", "--no-record", cwd=course)
    assert done.returncode == 2, done.stderr[-3000:]
    assert json.loads(done.stdout)["error"] == f"{path} would not be graded: {why}"

    assert list(pytest_verdicts(path, course).values()) == [f"{path} would not be graded: {why}"]

    done = run(str(BIN / "attn-grade"), "batch", lesson, "--course", str(course), "--json",
               "--workers", "1", cwd=course)  # fmt: skip
    (result,) = json.loads(done.stdout)
    assert result["status"] == "refused", result
    assert result["error"] == why, result
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb, pytest.raises(MissingEntry):
        gb.find_submission_notebook(lesson, lesson, "pasted")
