"""What the grader keeps of a cell's streams: as a terminal or JupyterLab shows them."""

from __future__ import annotations

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
