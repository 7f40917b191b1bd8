"""What the grader keeps of a cell's streams: as a terminal or JupyterLab shows them."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nbconvert.preprocessors.coalescestreams import CR_PAT

from autograder.outputs import as_shown, clean


def stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def test_a_progress_bar_keeps_its_last_state_and_other_output_its_place():
    bar = ["measuring:   0%|   | 0/8\r", "measuring:  50%|#  | 4/8\r", "measuring: 100%|###| 8/8\n"]
    raw = [stream("stderr", "\r" + bar[0]), stream("stderr", bar[1]), stream("stdout", "a\r\n"),
           stream("stderr", bar[2]), stream("stderr", "done\n")]  # fmt: skip
    out, spent = clean(raw, 10_000)
    assert out == [
        stream("stderr", "measuring:  50%|#  | 4/8\r"),  # nothing follows its last \r yet
        stream("stdout", "a\r\n"),  # a Windows line end is a line end
        stream("stderr", "measuring: 100%|###| 8/8\ndone\n"),
    ]
    assert spent == sum(len(o["text"]) for o in raw)  # the budget counts what was sent


def test_pieces_of_one_stream_are_one_output_and_overwrite_across_pieces():
    out, _ = clean([stream("stdout", "epoch 1"), stream("stdout", "\repoch 2"),
                    stream("stdout", "\repoch 3\n")], 10_000)  # fmt: skip
    assert out == [stream("stdout", "epoch 3\n")]


@given(st.text(alphabet="ab\r\n", max_size=40))
def test_shown_text_has_nothing_left_to_overwrite(text):
    shown = as_shown(text)
    assert shown == CR_PAT.sub("", text)  # nbconvert's rule
    assert re.search(r"\r[^\n]", shown) is None
    assert as_shown(shown) == shown
    assert shown.count("\n") == text.count("\n")  # no line is lost
    if "\r" not in text:
        assert shown == text


@pytest.mark.timeout(60)
def test_a_long_line_ending_in_a_carriage_return_is_shown_in_linear_time():
    """nbconvert's regular expression backtracks over the whole line from every position: 2 MB of
    it would hold the grader for over an hour (0.3 s for 16 000 characters, quadratic). A
    notebook may print that much; the trusted side must not stall on it."""
    line = "a" * 2_000_000 + "\r\n"
    out, _ = clean([stream("stdout", line)], 4_000_000)
    assert out == [stream("stdout", line)]
    assert as_shown("x\r" * 500_000 + "y") == "y"


def error(name: str, value: str) -> dict:
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": []}


def written(outputs: list[dict]) -> int:
    """Characters the outputs take in the notebook's file (nbformat writes JSON, non-ASCII as
    it is)."""
    return len(json.dumps(outputs, ensure_ascii=False))


def test_past_the_budget_one_error_a_cell_says_what_failed():
    """An error's name and the start of its value are kept when the budget is spent, so the
    learner sees what failed; a cell that appends 500 such errors to its outputs (the sandbox
    owns that list) keeps one, not 500 (``floods-errors`` in the hostile corpus)."""
    out, _ = clean([error("E" * 200, "V" * 2000)] * 500, 1000)
    errors = [o for o in out if o["output_type"] == "error"]
    assert len(errors) == 1, len(errors)
    assert errors[0]["ename"] == "E" * 200 and errors[0]["evalue"].startswith("V" * 200)
    assert written(out) < 1000 + 2000, written(out)
    assert out[-1]["text"].startswith("\n[output truncated by the grader")


@pytest.mark.parametrize("text", ["\x01" * 5000, "a\x1b[31mred\x1b[0m\n" * 500, "é" * 5000])
def test_the_budget_counts_characters_as_the_notebook_writes_them(text):
    """A control character is written as a six-character escape (``\\u0001``): the budget
    counts it so, and what is kept fits the budget as written."""
    out, spent = clean([stream("stdout", text)], 3000)
    kept = out[0]["text"]
    assert text.startswith(kept) and len(kept) > 0
    assert written([stream("stdout", kept)]) - written([stream("stdout", "")]) <= 3000 + 2 * len(
        re.findall(r"[\n\r\t\"\\]", kept)
    )
    assert spent <= 3000
