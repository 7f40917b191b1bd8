"""What the grader found, kept across re-grading: one JSON line per graded notebook.

Every way of grading into a course (``attn-grade batch``, plain ``nbgrader autograde`` with the
course's configuration) appends to ``COURSE/.attn-grade/history.jsonl`` from the trusted side,
where the gradebook is written: who, which notebook, which submission (a fingerprint of it),
when, how long it took, and every verdict with its *mistake* — the diagnosis with the numbers,
shapes and quoted learner text taken out, so the same mistake made by two students (or twice by
one) has the same key. nbgrader's gradebook keeps only the last grade; this keeps every attempt,
which is what class analytics needs (:mod:`autograder.report`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

FOLDER = ".attn-grade"
FILENAME = "history.jsonl"


def path_of(course: Path) -> Path:
    return Path(course) / FOLDER / FILENAME


def mistake_key(message: str) -> str:
    """The named mistake of a diagnosis, without the particulars of one submission.

    ``"masked key receives weight 0.31 at (b=0, i=1, j=3) on Q (2, 5, 4)"`` and the same with
    other numbers give one key; an exception keeps only its type (its text is the learner's).
    """
    text = str(message).strip()
    raised = re.match(r"raised (\w+)", text)
    if raised:
        return f"raised {raised.group(1)}"
    text = re.split(r"\s+on\s+(?=[A-Za-z_]\w* [\[(])", text, maxsplit=1)[0]  # "… on Q (2, 5, 4)"
    text = re.sub(r"\([^()]*\)", "(…)", text)
    text = re.sub(r"\[[^\[\]]*\]", "[…]", text)
    text = re.sub(r"(?<![\w-])[-−]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w-])", "#", text)  # not 02-softmax
    return re.sub(r"\s+", " ", text)[:200]


def record(course: Path, entry: dict) -> None:
    """Append one graded notebook (see the module doc) and make it durable."""
    folder = Path(course) / FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    entry = {"at": round(time.time(), 3), **entry}
    for verdict in entry.get("verdicts", []):
        verdict.setdefault(
            "mistake", "" if verdict.get("passed") else mistake_key(verdict["message"])
        )
    line = json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n"
    fd = os.open(folder / FILENAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def entries(course: Path, lesson: str | None = None) -> Iterator[dict]:
    """Every recorded notebook of ``lesson`` (all lessons if None), oldest first."""
    path = path_of(course)
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and (lesson is None or entry.get("lesson") == lesson):
                    yield entry
