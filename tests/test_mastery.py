"""Mastery records: written where the learner's home is, read back by the next lesson."""

import json

import pytest

from attnlib import mastery


@pytest.fixture(autouse=True)
def course_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_COURSE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_nothing_recorded_says_so():
    assert "no mastery check recorded yet" in mastery.before_lesson("02-softmax-masking")
    assert "first lesson" in mastery.before_lesson("01-scoring")


def test_a_passing_attempt_is_mastered_and_the_best_attempt_is_kept(course_home):
    mastery.record("01-scoring", 3, 5, missed=("scaling", "cosine"))
    text = mastery.before_lesson("02-softmax-masking")
    assert "not yet mastered, 3/5 (60%)" in text and "Revisit: scaling, cosine." in text
    mastery.record("01-scoring", 4, 5)
    assert mastery.before_lesson("02-softmax-masking") == "Lesson 01-scoring: mastered, 4/5 (80%)."
    mastery.record("01-scoring", 1, 5)  # a worse later attempt does not undo mastery
    assert mastery.best("01-scoring").score == 4
    data = json.loads((course_home / "mastery.json").read_text())
    assert data["01-scoring"]["latest"]["score"] == 1


def test_a_corrupt_file_counts_as_no_record(course_home):
    course_home.mkdir(parents=True)
    (course_home / "mastery.json").write_text("{not json")
    assert mastery.best("01-scoring") is None
    mastery.record("01-scoring", 5, 5)
    assert mastery.best("01-scoring").mastered


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown lesson '06-rnn'"):
        mastery.record("06-rnn", 1, 1)
    with pytest.raises(ValueError, match="score 6 out of total 5"):
        mastery.record("01-scoring", 6, 5)
