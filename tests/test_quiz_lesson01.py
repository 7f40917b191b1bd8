"""Lesson 01's mastery check: right answers in any reasonable form pass, classic mistakes fail."""

import math

import numpy as np
import pytest

from attnlib import quiz
from attnlib.quiz import lesson01

pytestmark = pytest.mark.lesson01

E = math.e

RIGHT = {
    "q1": [(5, 7), [5, 7], np.array([5, 7]), (np.int64(5), np.int64(7)), (5.0, 7.0), "(5, 7)",
           "5x7", "5 × 7", "5 by 7"],
    "q2": [64, 64.0, np.float32(64), np.int64(64), np.array(64.0), np.array([64.0]), 8**2, "64"],
    "q3": ["d", "D", "(d)", "d)", " d ", "cosine", "Cosine similarity", "cosine_scores", ["d"],
           {"d"}, ("D",)],
    "q4": [1 / (2 * E + 1), np.float32(1 / (2 * E + 1)), np.float64(0.1553624),
           np.array(1 / (2 * E + 1)), round(1 / (2 * E + 1), 7), "0.1553624"],
    "q5": ["b", "B", "(b)", "b)", "one-hot", "argmax", ["b"], {"B"}],
}  # fmt: skip

WRONG = {
    "q1": [
        (7, 5),
        (5, 16),
        (16, 16),
        (5, 7, 16),
        (5,),
        [7, 5],
        "(7, 5)",
        (True, 7),
        "7 by 5",
        "5 bytes 7",
    ],
    "q2": [8, 1, 0, 4096, 64.5, 63.9, -64, math.sqrt(64) / 64],
    "q3": ["a", "b", "c", "A", "dot", "additive", ["c", "d"], {"a", "d"}, "e", "cosine dot"],
    "q4": [
        E / (2 * E + 1),  # the weight of key 1 or key 3
        1 / 3,  # equal weights
        1 / (2 * math.exp(1 / math.sqrt(2)) + 1),  # scaled by sqrt(2): not the example
        0.0,
        1.0,
        0.155,  # rounded too coarsely: 0.0004 away
        1 / (2 * E),
    ],
    "q5": ["a", "c", "d", "uniform", ["a", "b"], "bb", "zeros"],
}


@pytest.mark.parametrize("key", sorted(RIGHT))
def test_right_answers_pass_in_every_form(key):
    q = quiz.question("01-scoring", key)
    for answer in RIGHT[key]:
        assert q.check(answer), f"{key} rejects the right answer {answer!r}"


@pytest.mark.parametrize("key", sorted(WRONG))
def test_classic_mistakes_fail(key):
    q = quiz.question("01-scoring", key)
    for answer in WRONG[key] + [True]:
        assert not q.check(answer), f"{key} accepts the wrong answer {answer!r}"


def test_torch_values_are_read_like_arrays():
    torch = pytest.importorskip("torch")
    assert quiz.question("01-scoring", "q1").check(torch.zeros(5, 7).shape)
    assert quiz.question("01-scoring", "q2").check(torch.tensor(64.0))
    assert quiz.question("01-scoring", "q4").check(torch.tensor(1 / (2 * E + 1)))
    assert not quiz.question("01-scoring", "q4").check(torch.tensor([0.1, 0.2]))


def test_hidden_test_entry_accepts_and_rejects():
    quiz.assert_correct("01-scoring", "q4", 1 / (2 * E + 1))
    with pytest.raises(AssertionError, match="Revisit: 01-scoring, 'A worked example by hand'"):
        quiz.assert_correct("01-scoring", "q4", E / (2 * E + 1))


def test_grading_all_right_answers_masters_the_lesson(capsys):
    answers = {key: forms[0] for key, forms in RIGHT.items()}
    attempt = quiz.grade("01-scoring", answers, record=False)
    assert attempt.score == attempt.total == len(lesson01.QUESTIONS)
    assert attempt.mastered
    assert "✗" not in capsys.readouterr().out


def test_grading_with_missing_answers_names_what_to_revisit(capsys):
    attempt = quiz.grade("01-scoring", {"q1": (5, 7)}, record=False)
    assert attempt.score == 1 and not attempt.mastered
    assert "01-scoring, 'Temperature'" in attempt.missed
