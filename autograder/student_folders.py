"""nbgrader's exchange where every server runs as one account: a folder of its own per student.

On Kubernetes every user's server runs as ``jovyan`` on one shared exchange volume, so file
ownership says nothing: in nbgrader's layout any student could read, overwrite or delete the
others' submissions, submit in their name, list and read their feedback, or replace what the
instructor released. With *student folders* (``c.StudentFolders.enabled = True``, set for the
hub's instructors by ``deploy/z2jh/values.yaml``) the exchange volume holds::

    EXCHANGE/COURSE/outbound/               what the instructor released
    EXCHANGE/COURSE/students/ID/inbound/    ID's submissions
    EXCHANGE/COURSE/students/ID/feedback/   ID's feedback

and the hub mounts into a student's server only ``outbound`` (read-only), that student's own
``inbound`` (as ``EXCHANGE/COURSE/inbound``) and own ``feedback`` (read-only, as
``EXCHANGE/COURSE/feedback``), the folders chosen from the name the hub logged them in under.
A student's nbgrader sees its usual layout and runs unchanged; an instructor's server mounts
the whole volume. Who submitted is then the folder an entry is in, not its owner:
:class:`autograder.collect.CheckedCollect` collects each folder's entries under the folder's
id and sets aside an entry named for anyone else, and :class:`FolderReleaseFeedback` releases
each student's feedback into their own folder.
"""

from __future__ import annotations

import glob
import os
import re
from fnmatch import fnmatchcase

from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from traitlets import Bool
from traitlets.config import Configurable

from autograder.submission import name_problems, printable

STUDENTS = "students"  # in the course's folder of the exchange: one folder per student
INBOUND, FEEDBACK = "inbound", "feedback"  # in a student's folder


class StudentFolders(Configurable):
    """The setting the exchange's classes share (see the module doc)."""

    enabled = Bool(
        False,
        help="Each student's submissions and feedback are in EXCHANGE/COURSE/students/ID/inbound "
        "and .../feedback, the only parts of the exchange the hub mounts into that student's "
        "server besides outbound (deploy/z2jh/values.yaml); an entry's id must be its folder's.",
    ).tag(config=True)


def student_folders(course_path: str, student: str = "*") -> list[tuple[str, str]]:
    """``(id, folder)`` of the course's student folders whose ids match ``student`` (a glob, as
    nbgrader's ``--student``), sorted by id; a name no student id can have is skipped."""
    root = os.path.join(course_path, STUDENTS)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    chosen = [n for n in names if fnmatchcase(n, student or "*") and not name_problems(n)]
    return [(n, os.path.join(root, n)) for n in chosen]


class FolderReleaseFeedback(ExchangeReleaseFeedback, StudentFolders):
    """nbgrader's ``release_feedback``; with student folders on, each student's feedback goes to
    ``EXCHANGE/COURSE/students/ID/feedback`` under the name nbgrader gives it (so the student's
    ``nbgrader fetch_feedback`` finds it in its ``feedback``, and nobody else can list it)."""

    def init_dest(self) -> None:
        if not self.enabled:
            return super().init_dest()
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.dest_path = os.path.join(self.course_path, STUDENTS)

    def copy_files(self) -> None:
        """nbgrader's own copy (its names, its ``--student``/exclusions), one student at a time,
        each into their own folder."""
        if not self.enabled:
            return super().copy_files()
        for student, folder in self._feedback_folders():
            self.src_path = folder
            self.dest_path = os.path.join(self.course_path, STUDENTS, student, FEEDBACK)
            os.makedirs(self.dest_path, mode=0o755, exist_ok=True)
            super().copy_files()

    def _feedback_folders(self) -> list[tuple[str, str]]:
        """``(id, folder)`` of each student whose feedback ``init_src`` found (its ``src_path``
        is a glob of their folders); an id no student can have is named in the log, not used."""
        c = self.coursedir
        pattern = c.format_path(c.feedback_directory, "(?P<student>[^/]*)", c.assignment_id,
                                escape=True)  # fmt: skip
        found = []
        for folder in sorted(glob.glob(self.src_path)):
            match = re.fullmatch(pattern, folder)
            problems = name_problems(match["student"]) if match else ["not a student's folder"]
            if problems:
                self.log.error(f"Feedback not released: {printable(folder)}: {problems[0]}")
            else:
                found.append((match["student"], folder))
        return found
