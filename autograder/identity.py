"""Whom a sandbox runs as: a user id that no other grader on the machine is using.

When the grader runs as root, each template (and every sandbox it forks) runs as an unprivileged
user id of its own, taken from a range that has no accounts; a template that the workers of a
batch share runs as one, and each worker's sandboxes as the worker's own
(:class:`autograder.template.Attached`). Two graders running at once — two batches, a batch and
``nbgrader autograde``, two workers of one batch — must never share one, or one's learner code
could signal the other's. A claim is an abstract Unix socket named after the id
(``@attn-grade-uid-61003``): binding it succeeds for exactly one process on the machine, and the
kernel releases it when that process exits, however it exits — no lock file is left behind.
"""

from __future__ import annotations

import contextlib
import pwd
import socket
from dataclasses import dataclass

FIRST_UID = 61000
COUNT = 1000


class NoFreeIdentity(RuntimeError):
    """Every user id of the range is claimed by a running grader."""


@dataclass
class Claim:
    """A user id held by this process until :meth:`release` (or exit)."""

    uid: int
    _sock: socket.socket

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def claim(first: int = FIRST_UID, count: int = COUNT) -> Claim:
    """Claim the first free user id of ``first … first + count - 1`` that has no account."""
    for uid in range(first, first + count):
        with contextlib.suppress(KeyError):
            pwd.getpwuid(uid)
            continue  # a real account: never run learner code as it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0attn-grade-uid-{uid}")
        except OSError:
            sock.close()
            continue
        return Claim(uid, sock)
    raise NoFreeIdentity(f"all {count} sandbox user ids from {first} are in use by other graders")
