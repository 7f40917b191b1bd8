"""The mastery check of lesson 02 accepts right answers however written, and only those.

For every question: right answers in the forms a learner would type pass; the classic
mistakes of the lesson (softmax over queries, the mask applied after the softmax, the −1e9
trick on a fully masked row, masking the diagonal) fail; garbage fails without raising.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

from attnlib import quiz
from attnlib.quiz import lesson02

pytestmark = pytest.mark.lesson02

LESSON = "02-softmax-masking"


def q(key):
    return quiz.question(LESSON, key)


# --- q1: shapes of S, A, O -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        ((5, 7), (5, 7), (5, 32)),
        [[5, 7], [5, 7], [5, 32]],
        ([5, 7], (5, 7), np.array([5, 32])),
        ((np.int64(5), np.int32(7)), (5, 7), (5, 32)),
        {"S": (5, 7), "A": (5, 7), "O": (5, 32)},
        {"o": [5, 32], "s": [5, 7], "a": [5, 7]},
        ("5x7", "(5, 7)", "5, 32"),
    ],
)
def test_q1_accepts_the_shapes_in_any_container(answer):
    assert q("q1").accepts(answer)


@pytest.mark.parametrize(
    "answer",
    [
        ((5, 7), (5, 7), (5, 16)),  # output takes d_k instead of d_v
        ((7, 5), (7, 5), (7, 32)),  # K Qᵀ: queries and keys swapped
        ((5, 5), (5, 5), (5, 32)),  # square "self-attention" habit
        ((5, 7), (5, 7), (7, 32)),  # output per key instead of per query
        ((5, 7), (5, 7)),  # too few
        ((5, 7), (5, 7), (5, 32), (5, 32)),  # too many
        ({5, 7}, {5, 7}, {5, 32}),  # sets have no order
        ((True, 7), (5, 7), (5, 32)),  # a bool is no dimension
        ((5.5, 7), (5, 7), (5, 32)),  # a fraction is no dimension
        "((5, 7), (5, 7), (5, 32))",
        {"S": (5, 7), "A": (5, 7)},
    ],
)
def test_q1_rejects_wrong_shapes(answer):
    assert not q("q1").accepts(answer)


# --- q2: keys query 2 may see --------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {0, 1, 2},
        [0, 1, 2],
        (2, 1, 0),
        frozenset({0, 1, 2}),
        np.array([0, 1, 2]),
        [np.int64(0), np.int64(1), np.int64(2)],
        [True, True, True, False],  # the mask row itself
        np.array([True, True, True, False]),
        "0, 1, 2",  # typed as text
        "0 1 2",
        "[0 1 2]",  # as NumPy prints it
        "{0, 1, 2}",
    ],
)
def test_q2_accepts_the_allowed_keys(answer):
    assert q("q2").accepts(answer)


@pytest.mark.parametrize(
    "answer",
    [
        {0, 1},  # diagonal masked (j < i)
        {2, 3},  # transposed mask (j >= i)
        {3},  # inverted mask
        {0, 1, 2, 3},  # no mask
        [1, 1, 1, 0],  # 0/1 ints read as indices {0, 1}
        [True, True, False, False],
        [True, True, True],
        [0.0, 1.0, 2.0],
        2,
        "0, 1",
        "0.0, 1.0, 2.0",
        "0-2",  # a range is not the keys
        "0, 1, 2, x",
    ],
)
def test_q2_rejects_the_classic_mask_mistakes(answer):
    assert not q("q2").accepts(answer)


# --- q3: the axis ------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [-1, 3, np.int64(-1), np.int32(3), 3.0, -1.0, "-1", " 3 "])
def test_q3_accepts_the_key_axis(answer):
    assert q("q3").accepts(answer)


@pytest.mark.parametrize(
    "answer", [-2, 2, 0, 1, -3, -4, 4, True, 2.5, math.inf, -math.inf, "-2", "last", [-1]]
)
def test_q3_rejects_other_axes(answer):
    assert not q("q3").accepts(answer)


# --- q4: what the wrong axis computes ------------------------------------------------------------


@pytest.mark.parametrize("answer", ["b", "B", " b ", "(b)", "b)", "B.", ["b"], {"B"}])
def test_q4_accepts_b_in_any_case(answer):
    assert q("q4").accepts(answer)


@pytest.mark.parametrize("answer", ["a", "c", "d", "A", "bb", "b or a", 2, ["a", "b"], [2]])
def test_q4_rejects_the_other_options(answer):
    assert not q("q4").accepts(answer)


def test_q4_answer_is_computed_from_the_options():
    assert lesson02._q4_expected() == "b"


# --- q5: a fully masked row --------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [[0, 0, 0, 0], (0.0, 0.0, 0.0, 0.0), np.zeros(4), [0, 0.0, np.float32(0), -0.0],
     "0, 0, 0, 0", "[0. 0. 0. 0.]"],
)  # fmt: skip
def test_q5_accepts_zeros(answer):
    assert q("q5").accepts(answer)


@pytest.mark.parametrize(
    "answer",
    [
        [0.25, 0.25, 0.25, 0.25],  # the −1e9 trick: uniform
        [math.nan] * 4,  # the −inf trick without care: NaN
        [1, 0, 0, 0],  # argmax of nothing
        [0, 0, 0],  # wrong length
        [False, False, False, False],  # bools are not weights
        0,
        "zeros",
        "0.25, 0.25, 0.25, 0.25",
        "nan, nan, nan, nan",
    ],
)
def test_q5_rejects_uniform_nan_and_other_rows(answer):
    assert not q("q5").accepts(answer)


# --- q6: masked softmax by hand ------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", [1 / 3, 0.333, 0.33, Fraction(1, 3), np.float32(1 / 3), np.array([1 / 3])]
)
def test_q6_accepts_one_third(answer):
    assert q("q6").accepts(answer)


@pytest.mark.parametrize(
    "answer",
    [
        1 / (3 + math.e**4),  # the mask ignored, or applied after the softmax
        0.25,  # uniform over all four keys
        0.3,  # too coarse
        1,
        0,
        "1/3",
        [1 / 3],
        True,
    ],
)
def test_q6_rejects_the_unmasked_and_uniform_answers(answer):
    assert not q("q6").accepts(answer)


# --- grading the whole check ---------------------------------------------------------------------


def test_grade_scores_right_and_wrong_answers(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path))
    right = {
        "q1": ((5, 7), (5, 7), (5, 32)),
        "q2": [0, 1, 2],
        "q3": -1,
        "q4": "B",
        "q5": [0, 0, 0, 0],
        "q6": 0.3333,
    }
    attempt = quiz.grade(LESSON, right)
    assert attempt.score == attempt.total == 6 and attempt.mastered
    wrong = {**right, "q3": -2, "q5": [0.25] * 4}
    attempt = quiz.grade(LESSON, wrong)
    assert attempt.score == 4 and not attempt.mastered
    assert any("Which axis? Keys, not queries" in topic for topic in attempt.missed)
    assert "revisit" in capsys.readouterr().out


def test_nothing_is_recorded_until_a_question_is_answered(monkeypatch, tmp_path, capsys):
    # a Run All halfway through the lesson: the answer cells still hold their blanks
    from attnlib import mastery

    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path))
    blank = {"q1": ..., "q2": None, "q6": ...}  # and q3, q4, q5 never run
    attempt = quiz.grade(LESSON, blank)
    assert attempt.score == 0 and not attempt.mastered
    assert mastery.best(LESSON) is None and "no mastery check recorded yet" in mastery.status(
        LESSON
    )
    assert "no question answered yet, so nothing was recorded" in capsys.readouterr().out
    attempt = quiz.grade(LESSON, {**blank, "q3": -2})  # one answer, wrong: an attempt
    assert mastery.best(LESSON) == attempt and attempt.score == 0
    assert "Revisit" in mastery.status(LESSON) and "0/6 (0%), not yet mastered" in (
        capsys.readouterr().out
    )
