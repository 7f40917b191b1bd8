"""``python -m benchmarks.touched``: the readings it writes down keep lesson 05's memory check
honest in both directions, right answers under its limit and naive ones over it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attnlib.checks import memory

pytestmark = [
    pytest.mark.lesson05,
    pytest.mark.skipif(memory.writable_memory() is None, reason="no /proc/self/smaps here"),
]
LIMIT = 4096 * 4096 * 8 / 2 / 2**20  # MiB: half the check's (n, n) float64 scores


def test_right_answers_touch_less_than_the_check_allows_and_naive_ones_more():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.touched", "--pages", "small"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    readings = {name: by_n["4096"] for name, by_n in json.loads(done.stdout).items()}
    naive = {name: calls for name, calls in readings.items() if name.startswith("naive")}
    right = {name: calls for name, calls in readings.items() if name not in naive}
    assert len(right) == 3 and len(naive) == 2, readings
    assert all(max(calls) < LIMIT for calls in right.values()), right
    assert all(min(calls) > LIMIT for calls in naive.values()), naive
