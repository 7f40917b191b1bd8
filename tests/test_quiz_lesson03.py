"""Lesson 03's mastery check accepts every form of a right answer and no wrong one."""

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib import quiz
from attnlib.quiz import lesson03

pytestmark = pytest.mark.lesson03

LESSON = "03-self-cross"
REPO = Path(__file__).resolve().parents[1]
GARBAGE = (None, "", "nonsense", 3.5, [], {}, object(), np.array([]), float("nan"), b"b")


def shown(answer) -> str:
    """A test id that is the same in every process (no memory address in it)."""
    text = repr(answer)
    return f"<{type(answer).__name__}>" if " at 0x" in text else text


def accepts(key, answer):
    return quiz.question(LESSON, key).accepts(answer)


def test_five_questions_in_order():
    assert [q.key for q in quiz.questions(LESSON)] == ["q1", "q2", "q3", "q4", "q5"]


def test_checkers_compute_the_known_answers():
    assert lesson03.cross_score_shape() == (2, 3, 4)
    assert lesson03.cross_sources_option() == "b"
    assert lesson03.self_attention_is_equivariant() is True
    assert lesson03.hard_reason_option() == "b"
    assert lesson03.pe_value() == pytest.approx(np.cos(3.0), abs=1e-15)


@pytest.mark.parametrize(
    "answer",
    [
        (2, 3, 4),
        [2, 3, 4],
        np.array([2, 3, 4]),
        torch.Size([2, 3, 4]),
        (np.int64(2), np.int32(3), 4),
    ],  # fmt: skip
)
def test_q1_right_forms(answer):
    assert accepts("q1", answer)


@pytest.mark.parametrize(
    "answer",
    [
        (2, 4, 3),  # keys and queries swapped
        (2, 3, 3),  # decoder self-attention's shape
        (2, 4, 4),  # encoder self-attention's shape
        (3, 4),  # batch axis forgotten
        (2, 3, 8),  # the output's shape, not the scores'
        (2.5, 3, 4),
        (True, 3, 4),
        np.array([[2, 3, 4]]),
        "(2, 4, 3)",
        *GARBAGE,
    ],
    ids=shown,
)
def test_q1_wrong_answers(answer):
    assert not accepts("q1", answer)


@pytest.mark.parametrize("answer", ["b", "B", " b ", "(b)", "b)", "B."])
def test_q2_right_forms(answer):
    assert accepts("q2", answer)


@pytest.mark.parametrize("answer", ["a", "c", "d", "e", "bc", 2, 1, *GARBAGE], ids=shown)
def test_q2_wrong_answers(answer):
    assert not accepts("q2", answer)


@pytest.mark.parametrize("answer", [True, np.bool_(True), "yes", "Yes", "True", "true", "y"])
def test_q3_right_forms(answer):
    assert accepts("q3", answer)


@pytest.mark.parametrize("answer", [False, np.bool_(False), "no", "False", "maybe", *GARBAGE])
def test_q3_wrong_answers(answer):
    assert not accepts("q3", answer)


@pytest.mark.parametrize("answer", ["b", "B", "(B)", " b."])
def test_q4_right_forms(answer):
    assert accepts("q4", answer)


@pytest.mark.parametrize("answer", ["a", "c", "d", "x", True, 2, *GARBAGE], ids=shown)
def test_q4_wrong_answers(answer):
    assert not accepts("q4", answer)


@pytest.mark.parametrize(
    "answer",
    [
        np.cos(3.0),
        float(np.cos(3.0)),
        float(np.float32(np.cos(3.0))),  # attnlib.torch's float32 answer
        np.array(np.cos(3.0)),
        np.array([np.cos(3.0)]),
        torch.tensor(np.cos(3.0), dtype=torch.float64),
        -0.9899924966004454,
        -0.98999249660,
    ],
    ids=shown,
)
def test_q5_right_forms(answer):
    assert accepts("q5", answer)


@pytest.mark.parametrize(
    "answer",
    [
        np.sin(3.0),  # sine and cosine swapped
        np.cos(3.0 / 10000 ** (1 / 16)),  # exponent i/d for column 1 instead of 2i/d with i=0
        np.cos(2.0),  # positions counted from 1
        np.cos(4.0),
        np.cos(np.deg2rad(3.0)),  # degrees instead of radians
        np.cos(3.0) + 2e-6,  # further than 1e-6
        -0.99,
        "-0.98999",
        np.array([np.cos(3.0), 0.0]),
        1j,
        True,
        *GARBAGE,
    ],
    ids=shown,
)
def test_q5_wrong_answers(answer):
    assert not accepts("q5", answer)


def test_grade_scores_a_full_and_an_empty_attempt(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path))
    right = {"q1": (2, 3, 4), "q2": "b", "q3": True, "q4": "B", "q5": np.cos(3.0)}
    attempt = quiz.grade(LESSON, right, record=False)
    assert (attempt.score, attempt.total) == (5, 5)
    attempt = quiz.grade(LESSON, {}, record=False)
    assert attempt.score == 0 and set(attempt.missed) == {q.topic for q in lesson03.QUESTIONS}
    capsys.readouterr()
