"""``python -m benchmarks.starved``: what the grader reads when a cell runs out of time."""

from __future__ import annotations

import json
import shlex

import pytest

from autograder import view
from benchmarks import starved

pytestmark = [
    pytest.mark.lesson02,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def test_a_cell_asleep_past_its_timeout_is_read_as_waiting_for_nothing(tmp_path):
    """One case measured in a real sandbox and written down: a sleeping cell ran out of time,
    waited for no processor, used none, and is not starved nor graded again beside others (with
    a quota or without: what its sandbox used is counted either way), and its row in the table
    says so, under the command that made it."""
    case = "sleeps past its timeout"
    args = ["--runs", "1", "--timeout", "2", "--case", case, "--out", str(tmp_path)]
    assert starved.main(args) == 0
    (read,) = json.loads((tmp_path / "starved.json").read_text())["rows"][case]
    assert read["out_of_time"] and not read["starved"] and not read["given_away"], read
    assert read["waited"] is not None and 0 <= read["waited"] < 0.05, read
    assert read["used"] is not None and 0 <= read["used"] < 0.05, read
    assert not read["crowded"], read
    row = f"| {case} | {read['waited']:.2f} | {read['used']:.2f} | 0 of 1 | no | 0 of 1 |"
    page = (tmp_path / "starved.md").read_text()
    assert row in page.splitlines(), page
    assert f"`python -m benchmarks.starved {shlex.join(args[:-2])} --out " in page
