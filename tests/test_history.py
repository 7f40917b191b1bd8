"""The course history: every graded notebook, every verdict, its mistake key; durable lines."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize(
    ("said", "key", "label"),
    [
        (["the mask is ignored: masked keys must get weight 0"] * 3,
         "the mask is ignored: masked keys must get weight #",
         "the mask is ignored: masked keys must get weight 0"),
        (["softmax normalises over the first axis; the default is the last axis (axis=-1)"],
         "softmax normalises over the first axis; the default is the last axis (…)",
         "softmax normalises over the first axis; the default is the last axis (axis=-1)"),
        (["masked key receives weight 0.31 at (b=0, i=1, j=3) on Q (2, 5, 4), K (2, 7, 4)",
          "masked key receives weight 0.07 at (b=0, i=1, j=3) on Q (1, 3, 8), K (1, 4, 8)"],
         "masked key receives weight # at (…)",
         "masked key receives weight # at (b=0, i=1, j=3)"),
        (["exp overflows (or underflows) for inputs near ±1000: subtract each slice's own "
          "maximum, np.max(x, axis=axis, keepdims=True), before exp on x = [[1000, 999], [1]]"],
         "exp overflows (…) for inputs near ±#: subtract each slice's own maximum, np.max(…), "
         "before exp on x = [[…], […]]",
         "exp overflows (or underflows) for inputs near ±1000: subtract each slice's own "
         "maximum, np.max(x, axis=axis, keepdims=True), before exp on x = [[1000, 999], [1]]"),
        (["raised ValueError: ask for full marks", "raised ValueError: ask for full marks"],
         "raised ValueError", "raised ValueError"),
    ],
)  # fmt: skip
def test_a_mistake_is_shown_with_what_every_diagnosis_of_it_says_alike(said, key, label):
    assert {history.mistake_key(m) for m in said} == {key}
    assert history.mistake_label(said) == label
    assert history.mistake_key(label) == key  # the label is one wording of its key


WORDS = st.sampled_from(["the weights of query", "sum to", "at", "not", "expected", ";"])
PARTICULARS = st.sampled_from(["0", "1", "-0.25", "2e-05", "(b=0, i=1)", "(axis=-1)", "[0, 1]"])


@given(
    st.lists(st.tuples(WORDS, PARTICULARS), min_size=1, max_size=5),
    st.lists(st.lists(PARTICULARS, min_size=5, max_size=5), min_size=1, max_size=4),
)
@settings(max_examples=200, deadline=None)
def test_a_label_puts_back_exactly_the_particulars_all_diagnoses_share(template, others):
    said = [" ".join(f"{w} {p}" for w, p in template)]
    said += [" ".join(f"{w} {p}" for (w, _), p in zip(template, ps, strict=False)) for ps in others]
    label = history.mistake_label(said)
    assert history.mistake_key(label) == history.mistake_key(said[0])
    shared = [
        i for i, (_, p) in enumerate(template)
        if all(p == ps[i] for ps in others)
    ]  # fmt: skip
    expected = " ".join(
        f"{w} {p if i in shared else history.mistake_key(p)}" for i, (w, p) in enumerate(template)
    )
    assert label == expected
