"""The batch's journal: ``COURSE/.attn-grade/LESSON.jsonl``, one line per finished student.

A batch killed half-way and run again reads it to grade only whom it had not finished (and those
whose submission changed since: :func:`stamp_of`). It needs neither nbgrader nor the gradebook, so
the batch can ask it, before loading them, whether it will grade anyone (:func:`unfinished`).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time
from pathlib import Path

from . import submission

JOURNAL_DIR = ".attn-grade"


class Journal:
    """One JSON line per finished student; fsync'd, so a killed batch knows who is done."""

    def __init__(self, course: Path, lesson: str):
        folder = course / JOURNAL_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        self.path = folder / f"{lesson}.jsonl"
        self.entries = journal_entries(course, lesson)

    def done(self, student: str, stamp: str) -> bool:
        return _graded_as(self.entries.get(student), stamp)

    def mark(self, entry: dict) -> None:
        self.entries[entry["student"]] = entry
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        fd = os.open(self.path, flags, 0o600)
        with open(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def forget(self, students: list[str] | None = None) -> None:
        """Forget every student (None), or those of ``students``: a line that none of them is
        done is written for each, so a rerun after a kill still grades them."""
        if students is None:
            self.entries = {}
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        for student in students:
            if student in self.entries:
                self.mark({"student": student, "status": "forced", "at": time.time()})


def journal_entries(course: Path, lesson: str) -> dict[str, dict]:
    """Each student's last line in the batch's journal of ``lesson`` (none if never run)."""
    entries: dict[str, dict] = {}
    path = Path(course) / JOURNAL_DIR / f"{lesson}.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill: that student is not done
            if isinstance(entry, dict) and "student" in entry:
                entries[entry["student"]] = entry
    return entries


def stamp_of(folder: Path) -> str:
    """A fingerprint of a submission folder's files (names and contents, links not followed)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(folder, followlinks=False)):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            h.update(os.fsencode(path.relative_to(folder)) + b"\0")
            with contextlib.suppress(OSError, submission.Refused):
                h.update(hashlib.sha256(submission.read(path)).digest())
    return h.hexdigest()[:16]


def _graded_as(entry: dict | None, stamp: str) -> bool:
    return bool(entry and entry.get("status") == "graded" and entry.get("stamp") == stamp)


def unfinished(course: Path, lesson: str) -> bool:
    """Whether a submission where nbgrader keeps them by default (``submitted/*/LESSON``) is not
    in the journal as graded as it is now, or has no autograded notebook: then the batch will
    grade someone, and starts its workers before it loads nbgrader. A folder the batch refuses
    (a link, a special file, a name it cannot spell) is graded by nobody: it needs no worker.

    Only a hint for that: the batch decides whom it grades (a new due date or late penalty, read
    from the gradebook and nbgrader's configuration, grades a student again too), and starts its
    workers then if they are not started yet."""
    entries = journal_entries(course, lesson)
    for folder in Path(course).glob(f"submitted/*/{glob.escape(lesson)}"):
        if submission.problems(folder, folder.parent, notebooks=[]):
            continue  # the batch refuses it, and says why; nothing of it is read here
        name = folder.parent.name
        graded = Path(course) / "autograded" / name / lesson
        if not any(graded.glob("*.ipynb")):
            return True
        if not _graded_as(entries.get(submission.shown(name)), stamp_of(folder)):
            return True
    return False
