"""Lesson 04's mastery check: right answers in any reasonable form pass, classic mistakes fail."""

import numpy as np
import pytest

from attnlib import quiz

pytestmark = pytest.mark.lesson04

LESSON = "04-multi-head"

RIGHT = {
    "q1": [1048576, 1048576.0, 4 * 512**2, np.int64(1048576), np.float32(1048576),
           np.array(1048576), np.array([1048576]), "1048576", "1,048,576", "1_048_576", 2**20],
    "q2": [(2, 8, 10, 64), [2, 8, 10, 64], np.array([2, 8, 10, 64]), (2.0, 8.0, 10.0, 64.0),
           tuple(np.int64(n) for n in (2, 8, 10, 64)), "(2, 8, 10, 64)", "2x8x10x64",
           "[2, 8, 10, 64]"],
    "q3": [64, 64.0, np.int64(64), np.float32(64), np.array(64.0), "64", 512 // 8, 8**2],
    "q4": ["c", "C", "(c)", "c)", " c ", "c."],
}  # fmt: skip

WRONG = {
    "q1": [
        4 * 512**2 + 4 * 512,  # with the biases
        3 * 512**2,  # forgot W_o
        512**2,  # one matrix
        4 * 512**2 // 8,  # per head
        4 * 64**2 * 8,  # 4·d_head²·h
        4 * 512,
        "1,048,577",
        -1048576,
    ],
    "q2": [
        (2, 10, 8, 64),  # reshaped, not transposed
        (2, 8, 10, 512),  # d_model kept per head
        (2, 64, 10, 8),  # d_head and h swapped
        (8, 2, 10, 64),
        (2, 8, 64),
        (2, 8, 10, 64, 1),
        "(2, 10, 8, 64)",
        (True, 8, 10, 64),
    ],
    "q3": [512, 8, 512**0.5, 8.0, 1, 0, 63.9, -64, "512"],
    "q4": ["a", "b", "d", "A", "e", "cc", "c d", ["a"]],
}


@pytest.mark.parametrize("key", sorted(RIGHT))
def test_right_answers_pass_in_every_form(key):
    q = quiz.question(LESSON, key)
    for answer in RIGHT[key]:
        assert q.check(answer), f"{key} rejects the right answer {answer!r}"


@pytest.mark.parametrize("key", sorted(WRONG))
def test_classic_mistakes_fail(key):
    q = quiz.question(LESSON, key)
    for answer in WRONG[key] + [True]:
        assert not q.check(answer), f"{key} accepts the wrong answer {answer!r}"


def test_the_answers_agree_with_the_reference():
    """The shape in q2 is what attnlib's split_heads makes; q1's count is 4·d_model²."""
    from attnlib import numpy as an

    assert an.split_heads(np.zeros((2, 10, 512)), 8).shape == (2, 8, 10, 64)
    assert quiz.question(LESSON, "q1").check(4 * 512 * 512)


def test_torch_values_are_read_like_arrays():
    torch = pytest.importorskip("torch")
    assert quiz.question(LESSON, "q1").check(torch.tensor(1048576))
    assert quiz.question(LESSON, "q2").check(torch.zeros(2, 8, 10, 64).shape)
    assert quiz.question(LESSON, "q3").check(torch.tensor(64.0))
    assert not quiz.question(LESSON, "q2").check(torch.zeros(2, 10, 8, 64).shape)


def test_grading_counts_every_question():
    answers = {"q1": 1048576, "q2": (2, 8, 10, 64), "q3": 64, "q4": "c"}
    attempt = quiz.grade(LESSON, answers, record=False)
    assert (attempt.score, attempt.total) == (4, 4)
    attempt = quiz.grade(LESSON, {"q1": 3 * 512**2, "q2": (2, 8, 10, 64)}, record=False)
    assert (attempt.score, attempt.total) == (1, 4)
    assert "04-multi-head, 'Counting parameters'" in attempt.missed
