"""autograder.hidden while a notebook is graded: the hidden test cells' entry points.

``check`` and ``answer`` raise the grader's verdict, reached outside the sandbox before the cell
ran, and print one line when it passed. The grade is the grader's whatever happens here.
"""

from __future__ import annotations

from autograder.sandbox import verdicts


def check(name: str, fn: object) -> None:
    """Raise ``AssertionError`` with the grader's diagnosis unless exercise ``name`` passed."""
    verdict = verdicts.given(name)
    if verdict is None:
        raise AssertionError(f"{name}: the grader did not check this cell")
    if not verdict.get("passed"):
        raise AssertionError(str(verdict.get("feedback", ""))) from None
    print(f"✓ {name}: hidden checks passed")


def answer(lesson: str, key: str, value: object) -> None:
    """Raise ``AssertionError`` unless the grader accepted the answer to question ``key``."""
    verdict = verdicts.given(key)
    if verdict is None:
        raise AssertionError(f"{key}: the grader did not check this cell")
    if not verdict.get("passed"):
        raise AssertionError(str(verdict.get("feedback", "")))
    print(f"✓ {key}")
