"""Lesson 06's mastery check: numbers of the learner's own, answers recomputed from them.

Every question accepts its computed answer in the forms a learner writes it and rejects the
classic mistakes; the numbers depend on the learner (``ATTN_STUDENT``, ``JUPYTERHUB_USER``, the
OS user) and on nothing else, so the same learner always gets the same ones.
"""

import getpass
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlib import quiz
from attnlib.quiz import lesson06, sheet06

pytestmark = pytest.mark.lesson06

LESSON = "06-build-and-train"
KEYS = [f"q{i}" for i in range(1, 7)]
LEARNERS = ["alice", "bob", "carol@example.org", "s1234567", "Zoë"]


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", "alice")
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    return "alice"


def forms(key: str, learner: str) -> list:
    """The right answer of ``key`` for ``learner``, written in every reasonable way."""
    right = lesson06.expected(key, learner)
    if key == "q1":
        gib = right / 2**30
        return [right, float(right), np.int64(right), f"{right:,}", f"{right} B",
                f"{gib} GiB", f"{right / 2**20} MiB", f"{right / 1e9} GB", gib,
                round(right, -(len(str(right)) - 3))]  # fmt: skip
    if key in ("q2", "q4"):
        v = np.asarray(right)
        return [v, v.tolist(), tuple(v.tolist()), np.round(v, 3).tolist(), torch.tensor(v),
                v.astype(np.float32), v[None]]  # fmt: skip
    if key == "q3":
        a, b = right
        return [(a, b), [a, b], np.array([a, b]), (float(a), float(b)),
                {"induction": a, "previous": b}, (np.int64(a), np.int64(b))]  # fmt: skip
    if key == "q5":
        return [right, float(right), np.int64(right), f"{right:,}", str(right), torch.tensor(right)]
    return [right, float(right), f"{right:,}", f"{right:.6e}", np.float64(right)]


def mistakes(key: str, learner: str) -> list:
    """Classic wrong answers of ``key`` for ``learner``."""
    n = lesson06.numbers(learner)
    right = lesson06.expected(key, learner)
    if key == "q1":
        p = n["q1"]
        return [right // 2,  # only K (or only V)
                right // p["layers"],  # one layer
                right // p["batch"] if p["batch"] > 1 else right * 3,  # batch forgotten
                right * 2 if p["dtype"] == "float16" else right // 2,  # wrong itemsize
                right // (2 if p["dtype"] == "float16" else 4),  # elements, not bytes
                f"{right / 2**30 * 1.1:.3f} GiB", -right]  # fmt: skip
    if key == "q2":
        p = n["q2"]
        y = np.exp(p["x"]) / np.exp(p["x"]).sum()
        g = np.array(p["grad_y"], dtype=float)
        return [y * g,  # forgot to subtract the weighted mean
                g - (g * y).sum(),  # forgot to multiply by y
                y * (g - g.mean()),  # plain mean instead of the y-weighted one
                -right, right[:2].tolist(), (right + 0.05).tolist()]  # fmt: skip
    if key == "q3":
        a, b = right
        return [(a - 1, b), (b, a), (a, b + 1), (a + 1, b), a, (a, b, 0), (a + 0.5, b)]
    if key == "q4":
        p = n["q4"]
        q, K = np.array(p["q"], float), np.array(p["K"], float)
        keep = np.arange(3) != p["masked"]
        unscaled = np.where(keep, np.exp(K @ q), 0)
        unmasked = np.exp(K @ q / 2)
        after = unmasked / unmasked.sum() * keep  # masked after the softmax
        return [unscaled / unscaled.sum(), unmasked / unmasked.sum(), after,
                np.where(keep, np.exp(K @ q / 4), 0) / np.where(keep, np.exp(K @ q / 4), 0).sum(),
                right[::-1], right[:2]]  # fmt: skip
    if key == "q5":
        d = n["q5"]["d_model"]
        return [4 * d * d, 3 * d * d + 3 * d, 4 * d * d + 2 * d, right + 1, -right, f"{right}.5"]
    p = n["q6"]
    one_head = right // p["heads"]
    return [one_head, 2 * p["n"] ** 2 * p["d_head"] * p["heads"], right * 2, right / 2,
            p["n"] ** 2 * p["d_head"] * p["heads"], right * 1.01]  # fmt: skip


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("who", LEARNERS)
def test_the_computed_answer_passes_in_every_reasonable_form(key, who, monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", who)
    q = quiz.question(LESSON, key)
    for answer in forms(key, who):
        assert q.check(answer) is True, f"{key} for {who!r} rejects the right answer {answer!r}"
        assert lesson06.check(key, answer, learner=who)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("who", LEARNERS)
def test_classic_mistakes_fail(key, who, monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", who)
    q = quiz.question(LESSON, key)
    for answer in mistakes(key, who) + [True, None, "", "banana"]:
        assert q.check(answer) is False, f"{key} for {who!r} accepts the wrong answer {answer!r}"


def test_different_learners_get_different_numbers_and_answers():
    drawn = {who: lesson06.numbers(who) for who in LEARNERS}
    for key in KEYS:
        distinct = {repr(drawn[who][key]) for who in LEARNERS}
        assert len(distinct) >= 3, f"{key}: {len(LEARNERS)} learners share too few numbers"
    alice, bob = drawn["alice"], drawn["bob"]
    assert alice != bob
    # Alice's answers are wrong for Bob wherever their numbers differ.
    for key in KEYS:
        if alice[key] != bob[key]:
            assert not lesson06.check(key, lesson06.expected(key, "alice"), learner="bob")


def test_the_same_learner_gets_the_same_numbers_every_time(monkeypatch):
    first = lesson06.numbers("alice")
    assert lesson06.numbers("alice") == first
    monkeypatch.setenv("ATTN_STUDENT", "alice")
    assert lesson06.numbers() == first
    assert quiz.learner_rng(LESSON, "alice").integers(0, 2**32, 4).tolist() == (
        quiz.learner_rng(LESSON, "alice").integers(0, 2**32, 4).tolist()
    )
    # The seed is a digest of the lesson and the learner, not Python's salted hash(): another
    # process, with another hash seed, draws the same numbers.
    code = "from attnlib.quiz import lesson06; print(lesson06.numbers('alice'))"
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        assert out.strip() == str(first)


def test_prompts_show_the_learners_own_numbers(monkeypatch):
    for who in ("alice", "bob"):
        monkeypatch.setenv("ATTN_STUDENT", who)
        n = lesson06.numbers()
        q1 = quiz.question(LESSON, "q1").describe()
        assert f"{n['q1']['layers']} layers" in q1 and f"{n['q1']['context']} tokens" in q1
        assert str(n["q2"]["x"]) in sheet06.prompt("q2")
        assert f"query {n['q3']['query']}" in sheet06.prompt("q3")
        assert f"CausalSelfAttention({n['q5']['d_model']}, {n['q5']['n_heads']})" in (
            sheet06.prompt("q5")
        )
        sheet = sheet06.sheet()
        assert repr(who) in sheet and all(f"{k}." in sheet for k in KEYS)


def test_learner_id_prefers_attn_student_then_the_hub_user_then_the_os_user(monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", "  carol  ")
    monkeypatch.setenv("JUPYTERHUB_USER", "dave")
    assert quiz.learner_id() == "carol"
    monkeypatch.setenv("ATTN_STUDENT", "")
    assert quiz.learner_id() == "dave"
    monkeypatch.delenv("ATTN_STUDENT")
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert quiz.learner_id() == getpass.getuser()


def test_grade_scores_the_learners_answers_and_prints_their_numbers(capsys, monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", "bob")
    answers = {key: lesson06.expected(key) for key in KEYS}
    attempt = quiz.grade(LESSON, answers, record=False)
    assert attempt.score == attempt.total == 6
    out = capsys.readouterr().out
    assert f"{lesson06.numbers()['q1']['layers']} layers" in out
    monkeypatch.setenv("ATTN_STUDENT", "alice")  # Bob's answers, Alice's numbers
    attempt = quiz.grade(LESSON, answers, record=False)
    assert attempt.score < 6


def test_q5_counts_the_torch_modules_parameters():
    import attnlib.torch as at

    for who in LEARNERS:
        p = lesson06.numbers(who)["q5"]
        d = p["d_model"]
        layer = at.CausalSelfAttention(d, p["n_heads"])
        assert lesson06.expected("q5", who) == sum(t.numel() for t in layer.parameters())
        assert lesson06.expected("q5", who) == 4 * d * d + 4 * d


def test_expected_answers_agree_with_closed_forms():
    for who in LEARNERS:
        n = lesson06.numbers(who)
        p = n["q1"]
        per_token = (
            2 * p["layers"] * p["heads"] * p["d_head"] * {"float16": 2, "float32": 4}[p["dtype"]]
        )
        assert lesson06.expected("q1", who) == per_token * p["batch"] * p["context"]
        p = n["q6"]
        assert lesson06.expected("q6", who) == 4 * p["n"] ** 2 * p["d_head"] * p["heads"]
        w = lesson06.expected("q4", who)
        assert math.isclose(w.sum(), 1.0) and w[n["q4"]["masked"]] == 0
        g = lesson06.expected("q2", who)
        assert abs(g.sum()) < 1e-12  # softmax's gradient sums to zero: shifting x changes nothing


def test_unknown_keys_are_named():
    with pytest.raises(ValueError, match="no question 'q7'"):
        lesson06.expected("q7")


def test_the_first_cell_reports_every_earlier_lesson_and_what_to_revisit(tmp_path, monkeypatch):
    from attnlib import mastery

    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path))
    text = mastery.before_lesson(LESSON)
    earlier = mastery.LESSONS[: mastery.LESSONS.index(LESSON)]
    assert all(f"Lesson {other}: no mastery check recorded yet" in text for other in earlier)
    assert "Not yet mastered: " + ", ".join(earlier) in text
    for other in earlier:
        mastery.record(other, 5, 5)
    mastery.record("03-self-cross", 1, 5, missed=("03-self-cross, 'Cross-attention'",))
    text = mastery.before_lesson(LESSON)
    assert "Lesson 03-self-cross: mastered, 5/5" in text  # the best attempt counts
    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path / "other"))
    for other in earlier:
        if other == "04-multi-head":
            mastery.record(other, 2, 5, missed=("04-multi-head, 'X'",))
        else:
            mastery.record(other, 5, 5)
    text = mastery.before_lesson(LESSON)
    assert "Not yet mastered: 04-multi-head." in text and "Revisit: 04-multi-head, 'X'." in text
    for other in earlier:
        mastery.record(other, 5, 5)
    assert mastery.before_lesson(LESSON).endswith("All 5 are mastered: go on.")
    # The other lessons still report only the lesson before them.
    assert mastery.before_lesson("02-softmax-masking") == "Lesson 01-scoring: mastered, 5/5 (100%)."


def test_grading_records_mastery_of_the_last_lesson(tmp_path, monkeypatch):
    from attnlib import mastery

    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    answers = {key: lesson06.expected(key) for key in KEYS}
    answers["q6"] = -1
    attempt = quiz.grade(LESSON, answers)
    assert mastery.best(LESSON).score == 5 and attempt.mastered


ODD = [None, "", "banana", b"b", 3.5, float("nan"), float("inf"), object(), Ellipsis, "x", "GiB",
       {}, [], (), {"a": 1}, np.array([]), np.array(np.nan), np.array([1.0, 2.0]), lambda: 1,
       [float("nan")] * 3, ["a", "b", "c"], (1, 2, 3, 4)]  # fmt: skip


@pytest.mark.parametrize("who", LEARNERS)
def test_odd_answers_are_wrong_and_never_raise(who, monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", who)
    for q in quiz.questions(LESSON):
        for answer in ODD:
            assert q.check(answer) is False, f"{q.key} accepts {answer!r}"


def test_a_grader_judges_as_the_submitter_whatever_the_notebook_claims(monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT", "mallory")  # what the learner's own notebook may set
    q1 = quiz.question(LESSON, "q1")
    alices, mallorys = lesson06.expected("q1", "alice"), lesson06.expected("q1", "mallory")
    assert alices != mallorys
    with quiz.as_learner("alice"):
        assert quiz.learner_id() == "alice"
        assert q1.accepts(alices) and not q1.accepts(mallorys)
        assert quiz.verdict(LESSON, "q1", alices) == (True, "")
    assert quiz.learner_id() == "mallory"  # only within the block
