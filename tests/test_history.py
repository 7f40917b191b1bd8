"""The course history: every graded notebook, every verdict, its mistake key; durable lines."""

from __future__ import annotations

import os

import pytest

from autograder import history


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("masked key receives weight 0.31 at (b=0, i=1, j=3) on Q (2, 5, 4), K (2, 7, 4)",
         "masked key receives weight 0.07 at (b=1, i=0, j=2) on Q (1, 3, 8), K (1, 4, 8)"),
        ("raised ValueError: shapes (2,3) and (4,5) not aligned", "raised ValueError: bad <b>"),
        ("weights[0, 1] is 0.5, expected 0.25 (largest difference 0.25)",
         "weights[3, 2] is 1.5, expected -2e-05 (largest difference 1.5)"),
    ],
)  # fmt: skip
def test_one_mistake_made_twice_has_one_key(one, other):
    assert history.mistake_key(one) == history.mistake_key(other)
    assert history.mistake_key(one) != history.mistake_key("scores scaled by d_k")


def test_entries_are_appended_privately_and_read_back_per_lesson(tmp_path):
    history.record(tmp_path, {"student": "a", "lesson": "01", "verdicts": [
        {"name": "softmax", "passed": False, "message": "raised KeyError: 'x'"}]})  # fmt: skip
    history.record(tmp_path, {"student": "b", "lesson": "02", "verdicts": []})
    with open(history.path_of(tmp_path), "a") as f:
        f.write('{"student": "cut short"')  # a batch killed mid-line
    assert [e["student"] for e in history.entries(tmp_path)] == ["a", "b"]
    (only,) = history.entries(tmp_path, "01")
    assert only["verdicts"][0]["mistake"] == "raised KeyError" and only["at"] > 0
    assert os.stat(history.path_of(tmp_path)).st_mode & 0o077 == 0
    assert os.stat(tmp_path / history.FOLDER).st_mode & 0o077 == 0
