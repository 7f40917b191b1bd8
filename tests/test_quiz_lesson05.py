"""Lesson 05's mastery check: right answers in any reasonable form pass, classic mistakes fail."""

import math

import numpy as np
import pytest

from attnlib import quiz
from attnlib.quiz import lesson05

pytestmark = pytest.mark.lesson05

LESSON = "05-complexity"

BYTES = 12 * 8192**2 * 4  # 3 GiB
P = float(np.polyfit(np.log(lesson05.Q4_NS), np.log(lesson05.Q4_TIMES), 1)[0])  # 1.637

RIGHT = {
    "q1": [BYTES, float(BYTES), np.int64(BYTES), np.float64(BYTES), np.array(BYTES), 3, 3.0,
           "3221225472", "3,221,225,472", "3 GiB", "3GiB", "3.0 gib", "3072 MiB", "3.22 GB",
           "3.2 GB", "3221225472 bytes", 3.22e9, 2**30 * 3],
    "q2": [4, 4.0, np.int64(4), np.float32(4), np.array(4.0), "4", "4x", "x4", "×4", "4 times",
           "four", 2**2],
    "q3": ["b", "B", "(b)", "b)", " b ", "b."],
    "q4": [P, round(P, 2), round(P, 3), np.float32(P), np.array(P), "1.64", "1.637", 1.63],
}  # fmt: skip

WRONG = {
    "q1": [
        8192**2 * 4,  # forgot the heads
        12 * 8192**2,  # elements, not bytes
        12 * 8192**2 * 2,  # float16
        12 * 8192**2 * 8,  # float64
        12 * 8192 * 4,  # n, not n²
        0.25,  # GiB without the heads
        1.5,
        "3 MiB",
        "3 GB",  # 7 % short: a GB is not a GiB
        "3.2 GiB",
        -BYTES,
        "3 parsecs",
    ],
    "q2": [2, 8, 16, 1, 3, "2x", "x2", "8", "twice", 4.1],
    "q3": ["a", "c", "d", "C", "e", "bb", "b c", ["b", "c"]],
    "q4": [
        2.0,  # the textbook exponent, not the fit
        1.60,  # only the first and last point
        float(np.polyfit(np.log(lesson05.Q4_TIMES), np.log(lesson05.Q4_NS), 1)[0]),  # swapped
        float(np.polyfit(np.log(lesson05.Q4_NS), np.log(lesson05.Q4_TIMES), 1)[1]),  # intercept
        float(np.polyfit(lesson05.Q4_NS, lesson05.Q4_TIMES, 1)[0]),  # no logs
        float(np.polyfit(lesson05.Q4_NS, np.log(lesson05.Q4_TIMES), 1)[0]),  # only times logged
        1.6,
        1.7,
        "2",
    ],
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
    from attnlib import numpy as an

    assert an.score_matrix_bytes(1, 12, 8192, 8192, 4) == BYTES == 3 * 2**30
    assert math.isclose(an.fit_exponent(lesson05.Q4_NS, lesson05.Q4_TIMES), P)
    # the table is far enough from its textbook exponent that guessing 2 is wrong
    assert abs(P - 2) > 0.1


def test_torch_values_are_read_like_arrays():
    torch = pytest.importorskip("torch")
    assert quiz.question(LESSON, "q1").check(torch.tensor(float(BYTES)))
    assert quiz.question(LESSON, "q2").check(torch.tensor(4))
    assert quiz.question(LESSON, "q4").check(torch.tensor(P))
    assert not quiz.question(LESSON, "q2").check(torch.tensor(2))


def test_grading_counts_every_question():
    answers = {"q1": BYTES, "q2": 4, "q3": "b", "q4": P}
    attempt = quiz.grade(LESSON, answers, record=False)
    assert (attempt.score, attempt.total) == (4, 4)
    attempt = quiz.grade(LESSON, {"q1": BYTES // 12, "q3": "b"}, record=False)
    assert (attempt.score, attempt.total) == (1, 4)
    assert "05-complexity, 'Where the memory goes'" in attempt.missed
