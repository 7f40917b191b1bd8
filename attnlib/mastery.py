"""Mastery records: which lessons a learner has mastered, kept in a small JSON file.

Each lesson ends with a mastery check; its score is recorded here, and the next
lesson's first cell reads it back to say plainly whether to go on or what to
revisit. The file lives under the learner's home
(``~/.attention-course/mastery.json``), or under ``$ATTN_COURSE_HOME`` when set.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

THRESHOLD = 0.8
LESSONS = (
    "01-scoring",
    "02-softmax-masking",
    "03-self-cross",
    "04-multi-head",
    "05-complexity",
    "06-build-and-train",
)


def store_path() -> Path:
    """Where the records live: ``$ATTN_COURSE_HOME/mastery.json`` or under the home folder."""
    root = os.environ.get("ATTN_COURSE_HOME") or Path.home() / ".attention-course"
    return Path(root) / "mastery.json"


@dataclass(frozen=True)
class Attempt:
    """One mastery check: score out of total, and the topics of the questions missed."""

    lesson: str
    score: float
    total: float
    missed: tuple[str, ...] = ()
    when: str = ""

    @property
    def fraction(self) -> float:
        return self.score / self.total if self.total else 0.0

    @property
    def mastered(self) -> bool:
        return self.fraction >= THRESHOLD


def _check_lesson(lesson: str) -> None:
    if lesson not in LESSONS:
        raise ValueError(f"unknown lesson {lesson!r}; lessons are {', '.join(LESSONS)}")


def load() -> dict[str, dict]:
    """All records, by lesson; an unreadable file counts as none (and is left alone)."""
    try:
        data = json.loads(store_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(lesson: str, score: float, total: float, missed: tuple[str, ...] = ()) -> Attempt:
    """Record an attempt; the lesson's best attempt is kept beside the latest."""
    _check_lesson(lesson)
    if not (total > 0 and 0 <= score <= total):
        raise ValueError(f"score {score} out of total {total}: need 0 <= score <= total, total > 0")
    attempt = Attempt(lesson, float(score), float(total), tuple(missed),
                      datetime.now(UTC).isoformat(timespec="seconds"))  # fmt: skip
    data = load()
    entry = data.get(lesson, {})
    latest = {"score": attempt.score, "total": attempt.total, "missed": list(attempt.missed),
              "when": attempt.when}  # fmt: skip
    best = entry.get("best")
    if not best or attempt.fraction >= best["score"] / best["total"]:
        best = latest
    data[lesson] = {"latest": latest, "best": best}
    _write(data)
    return attempt


def _write(data: dict) -> None:
    path = store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a crash never leaves half a file.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(f.name, path)


def best(lesson: str) -> Attempt | None:
    """The best recorded attempt at ``lesson``, or None."""
    _check_lesson(lesson)
    entry = load().get(lesson, {}).get("best")
    if not entry:
        return None
    try:
        return Attempt(lesson, float(entry["score"]), float(entry["total"]),
                       tuple(entry.get("missed", ())), str(entry.get("when", "")))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def status(lesson: str) -> str:
    """One sentence on ``lesson``: mastered, not yet (and what to revisit), or not attempted."""
    attempt = best(lesson)
    if attempt is None:
        return f"Lesson {lesson}: no mastery check recorded yet. Finish its mastery check first."
    score = f"{attempt.score:g}/{attempt.total:g} ({attempt.fraction:.0%})"
    if attempt.mastered:
        return f"Lesson {lesson}: mastered, {score}."
    revisit = f" Revisit: {', '.join(attempt.missed)}." if attempt.missed else ""
    return f"Lesson {lesson}: not yet mastered, {score}; {THRESHOLD:.0%} is needed.{revisit}"


def before_lesson(lesson: str) -> str:
    """What a lesson's first cell prints: the state of the lesson before it.

    The last lesson of the course builds on all the others, so it reports every earlier lesson,
    one line each, and ends by naming those not yet mastered (or saying that all are).
    """
    _check_lesson(lesson)
    index = LESSONS.index(lesson)
    if index == 0:
        return f"Lesson {lesson} is the first lesson: nothing to master before it."
    if index < len(LESSONS) - 1:
        return status(LESSONS[index - 1])
    earlier = LESSONS[:index]
    lines = [f"Lesson {lesson} uses all {len(earlier)} lessons before it:"]
    lines += [f"  {status(other)}" for other in earlier]
    missing = [other for other in earlier if not (best(other) and best(other).mastered)]
    if missing:
        lines.append(
            f"Not yet mastered: {', '.join(missing)}. Revisit the sections named above first; "
            "this lesson's mastery check also reviews them."
        )
    else:
        lines.append(f"All {len(earlier)} are mastered: go on.")
    return "\n".join(lines)
