"""The grader's verdicts on the test cell that is running now.

The trusted side checks a test cell's functions from outside the sandbox *before* the cell runs,
then sends the verdicts with the request to run it. The executor puts them here, and the
sandbox's ``report``, ``check`` and ``answer`` print or raise them, so the notebook shows what the
grader decided. What learner code does to this dictionary changes only what the notebook shows:
the grade is the trusted side's.
"""

CURRENT: dict[str, dict] = {}


def given(name: str) -> dict | None:
    """The verdict on ``name`` (an exercise or a question) for the running cell, if any."""
    verdict = CURRENT.get(str(name))
    return verdict if isinstance(verdict, dict) else None
