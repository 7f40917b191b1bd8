"""``python -m benchmarks.writer``: the CPU the batch's own process spends on each submission."""

from __future__ import annotations

import json
import shlex

import pytest

from autograder import view
from benchmarks import writer
from benchmarks.machine import run_context

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def test_two_real_batches_are_read_and_what_a_submission_added_is_written_down(tmp_path):
    """Classes of 1 and 3 graded by real batches, each in a process of its own: every student is
    graded, each batch's own CPU is read apart from the machine's, and the page gives what the
    two added students cost, derived from the runs written beside it."""
    args = ["--students", "1", "3", "--rounds", "1", "--workers", "1", "--out", str(tmp_path)]
    assert writer.main(args) == 0
    result = json.loads((tmp_path / "writer.json").read_text())
    runs = {r["students"]: r for r in result["runs"]}
    assert sorted(runs) == [1, 3]
    for students, run in runs.items():
        assert run["graded"] == students, run
        # the batch imports nbgrader and the lesson's libraries: more than a second of its own;
        # the machine ran its worker and sandboxes besides
        assert 0.5 < run["writer"] < run["machine"], run
    (added,) = result["rounds"]
    assert added["writer"] == pytest.approx((runs[3]["writer"] - runs[1]["writer"]) / 2)
    assert added["rest"] == pytest.approx(
        (runs[3]["machine"] - runs[1]["machine"]) / 2 - added["writer"]
    )
    page = (tmp_path / "writer.md").read_text()
    assert f"| 1 | 3 | 3 | {runs[3]['writer']:.2f} | {runs[3]['machine']:.2f} |" in page, page
    assert f"| 1 | {added['writer']:.3f} | {added['rest']:.3f} |" in page, page
    assert f"`python -m benchmarks.writer {shlex.join(args[:-2])} --out " in page


def test_a_batch_that_fails_stops_the_benchmark_with_its_words(tmp_path):
    """A folder that is no course is no measurement: the benchmark stops and shows what the
    batch said."""
    course = tmp_path / "course"
    course.mkdir()
    with pytest.raises(SystemExit, match="attn-grade batch failed") as stopped:
        writer.grade(course, "02-softmax-masking", workers=1)
    assert "does not look like an nbgrader course" in str(stopped.value)


def test_a_writer_that_spent_less_on_the_larger_class_is_written_as_noise():
    """Classes close in size on a busy host: the larger one's batch may spend less of its own
    CPU than the smaller one's. The page says so with a dash, not a number of workers."""
    runs = [{"round": 1, "students": 1, "graded": 1, "writer": 1.78, "machine": 6.74},
            {"round": 1, "students": 3, "graded": 3, "writer": 1.68, "machine": 8.41}]  # fmt: skip
    rounds = [writer.per_submission(runs, 1, [1, 3])]
    assert rounds[0]["writer"] < 0 and rounds[0]["workers"] is None
    result = {"context": run_context(), "lesson": "02-softmax-masking", "workers": 1,
              "sizes": [1, 3], "runs": runs, "rounds": rounds}  # fmt: skip
    page = writer.report(result, "python -m benchmarks.writer")
    assert "| 1 | -0.050 | 0.885 | – | 1.83 |" in page, page
    assert "| median | -0.050 | 0.885 | – |" in page, page
