"""Who is learning, and numbers of their own: shared by the quiz and the grader's sandbox.

Parameterised questions draw each learner's numbers from :func:`learner_rng`; the grader judges
an answer as its submitter's (:func:`as_learner`) and gives the sandbox their id
(``ATTN_STUDENT``), so the notebook shows the same numbers the grader checks.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import hashlib
import os
from collections.abc import Iterator

import numpy as np

_LEARNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("learner", default=None)


@contextlib.contextmanager
def as_learner(learner: str) -> Iterator[None]:
    """Judge answers as ``learner``'s within this block (a grader that knows who submitted)."""
    token = _LEARNER.set(str(learner))
    try:
        yield
    finally:
        _LEARNER.reset(token)


def learner_id() -> str:
    """Who is learning: the learner of :func:`as_learner`, else ``$ATTN_STUDENT``, else
    ``$JUPYTERHUB_USER``, else the OS user name."""
    forced = _LEARNER.get()
    if forced:
        return forced
    for variable in ("ATTN_STUDENT", "JUPYTERHUB_USER"):
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no user name to be had (a bare container)
        return "learner"


def learner_rng(lesson: str, learner: str | None = None) -> np.random.Generator:
    """A random generator seeded by ``lesson`` and the learner (default :func:`learner_id`).

    The seed is a SHA-256 digest of both, so it is the same in every process and on every
    machine for the same learner, and different for different learners or lessons.
    """
    who = learner_id() if learner is None else str(learner)
    digest = hashlib.sha256(f"{lesson}\0{who}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))
