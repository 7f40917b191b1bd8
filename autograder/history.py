"""What the grader found, kept across re-grading: one JSON line per graded notebook.

Every way of grading into a course (``attn-grade batch``, plain ``nbgrader autograde`` with the
course's configuration) appends to ``COURSE/.attn-grade/history.jsonl`` from the trusted side,
where the gradebook is written: who, which notebook, which submission (a fingerprint of it),
when, how long it took, and every verdict with its diagnosis and its *mistake* — the diagnosis
with the numbers, shapes and quoted learner text taken out, so the same mistake made by two
students (or twice by one) has the same key. Reports show a mistake by its *label*
(:func:`mistake_label`): the key with what all its diagnoses say alike put back. nbgrader's
gradebook keeps only the last grade; this keeps every attempt, which is what class analytics
needs (:mod:`autograder.report`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

FOLDER = ".attn-grade"
FILENAME = "history.jsonl"


def path_of(course: Path) -> Path:
    return Path(course) / FOLDER / FILENAME


# What one submission's diagnosis says that another's would say otherwise: a parenthesis
# ("(b=0, i=1)"), a bracket ("[[1000, 999]]") or a number ("0.31", not the 02 of 02-softmax).
PARTICULAR = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|(?<![\w-])[-−]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w-])")
ON_PROBLEM = re.compile(r"\s+on\s+(?=[A-Za-z_]\w* [\[(])")  # "… on Q (2, 5, 4), K …"
KEY_LENGTH = 200
LABEL_LENGTH = 300


def _placeholder(particular: str) -> str:
    return {"(": "(…)", "[": "[…]"}.get(particular[0], "#")


def _pieces(message: str) -> tuple[list[str], list[str]]:
    """A diagnosis as its fixed words and the particulars between them: ``words`` has one more
    item than ``particulars``. An exception keeps only its type (its text is the learner's)."""
    text = str(message).strip()
    raised = re.match(r"raised (\w+)", text)
    if raised:
        return [f"raised {raised.group(1)}"], []
    text = ON_PROBLEM.split(text, maxsplit=1)[0]
    words, particulars, at = [], [], 0
    for found in PARTICULAR.finditer(text):
        words.append(text[at : found.start()])
        particulars.append(found.group(0))
        at = found.end()
    return [*words, text[at:]], particulars


def _joined(words: list[str], particulars: list[str]) -> str:
    return re.sub(
        r"\s+", " ", "".join(w + p for w, p in zip(words, [*particulars, ""], strict=True))
    )


def mistake_key(message: str) -> str:
    """The named mistake of a diagnosis, without the particulars of one submission.

    ``"masked key receives weight 0.31 at (b=0, i=1, j=3) on Q (2, 5, 4)"`` and the same with
    other numbers give one key, ``"masked key receives weight # at (…)"``; an exception keeps
    only its type (its text is the learner's).
    """
    words, particulars = _pieces(message)
    return _joined(words, [_placeholder(p) for p in particulars])[:KEY_LENGTH]


def mistake_label(messages: Iterable[str]) -> str:
    """How diagnoses that share a key word their mistake: the key, with every particular that
    all of them say alike put back. ``"… must get weight 0"`` said by every student stays so
    (its key reads ``"… weight #"``); ``"weight 0.31"`` and ``"weight 0.07"`` read ``"weight #"``.
    """
    messages = list(messages)
    said = [_pieces(m) for m in messages]
    if not said:
        return ""
    words, particulars = said[0]
    if any(w != words or len(p) != len(particulars) for w, p in said[1:]):
        return mistake_key(messages[0])  # one key, worded apart only in its spacing or its cut
    alike = [
        p if all(other[i] == p for _, other in said) else _placeholder(p)
        for i, p in enumerate(particulars)
    ]
    text = _joined(words, alike)
    return text if len(text) <= LABEL_LENGTH else text[: LABEL_LENGTH - 1] + "…"


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
