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
id and sets aside an entry named for anyone else, :class:`FolderReleaseFeedback` releases
each student's feedback into their own folder, and :class:`FolderList` makes the instructor's
``nbgrader list --inbound`` list every student's folder.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from fnmatch import fnmatchcase
from itertools import groupby

from nbgrader.exchange.default.list import ExchangeList
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.utils import notebook_hash
from traitlets import Bool
from traitlets.config import Configurable

from autograder.submission import Refused, name_problems, printable, read

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


def inbound_entries(course_path: str, student: str = "*", assignment: str = "*"):
    """``(path, folder id)`` of every entry of ``assignment`` (a glob) in the own ``inbound`` of
    each student ``student`` (a glob) matches, named for anyone: whether an entry is named for
    its folder's student is for the caller to check (:func:`named_for`)."""
    return [
        (path, owner)
        for owner, folder in student_folders(course_path, student)
        for path in sorted(
            glob.glob(os.path.join(glob.escape(folder), INBOUND, f"*+{assignment}+*"))
        )
    ]


def named_for(name: str) -> str:
    """The student an inbound entry's name (``STUDENT+ASSIGNMENT+TIME[+RANDOM]``) is for."""
    return name.rsplit("+", 3)[0]


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


class FolderList(ExchangeList, StudentFolders):
    """nbgrader's ``list``; with student folders on, ``--inbound`` (an instructor's) lists each
    student's own ``inbound``, and says whether their feedback waits in their own ``feedback``.

    nbgrader looks in ``EXCHANGE/COURSE/inbound``, which no longer holds anything, so it listed
    nobody. An entry named for a student other than its folder's is not listed but named in the
    log, as the collect sets it aside. A student's folder is theirs to fill from their server, so
    nothing in it is read through a link or past a size (:func:`autograder.submission.read`), and
    an entry that is not a folder (``--remove`` would delete through a link) is not listed."""

    def init_dest(self) -> None:
        if not (self.enabled and self.inbound):
            return super().init_dest()
        c = self.coursedir
        assignment, student = c.assignment_id or "*", c.student_id or "*"
        self.assignments = []
        for course_path in sorted(glob.glob(os.path.join(self.root, c.course_id or "*"))):
            for path, owner in inbound_entries(course_path, student, assignment):
                why = _not_listed(path, owner)
                if why:
                    where = printable(os.path.relpath(path, course_path))
                    self.log.warning(f"Not listed: {where}: {why}")
                else:
                    self.assignments.append(path)

    def parse_assignments(self) -> list[dict]:
        if not (self.enabled and self.inbound):
            return super().parse_assignments()
        found = sorted((self._entry(path) for path in self.assignments), key=_whose)
        groups = [sorted(entries, key=lambda info: info["timestamp"])
                  for _, entries in groupby(found, _whose)]  # fmt: skip
        return [{**{k: entries[0][k] for k in WHOSE}, "status": "submitted",
                 "submissions": entries} for entries in groups]  # fmt: skip

    def _entry(self, path: str) -> dict:
        """nbgrader's record of one submission (as its ``parse_assignments`` makes for
        ``--inbound``), its feedback looked for in the student's own folder."""
        inbound = os.path.dirname(path)
        folder = os.path.dirname(inbound)
        course_path = os.path.dirname(os.path.dirname(folder))
        student = os.path.basename(folder)  # whom the entry is named for (_not_listed)
        assignment, timestamp, *rest = os.path.basename(path)[len(student) + 1 :].split("+", 2)
        info = {"course_id": os.path.basename(course_path), "student_id": student,
                "assignment_id": assignment, "timestamp": timestamp,
                "random_string": f"+{rest[0]}" if rest else None, "status": "submitted",
                "path": path, "has_local_feedback": False, "feedback_updated": False,
                "local_feedback_path": None}  # fmt: skip
        secret = _text(os.path.join(path, "submission_secret.txt"), limit=SECRET_BYTES)
        info["notebooks"] = []
        for notebook in sorted(glob.glob(os.path.join(glob.escape(path), "*.ipynb"))):
            notebook_id = os.path.splitext(os.path.basename(notebook))[0]
            # where nbgrader's release_feedback puts the page: named from the submission's secret
            page = secret and notebook_hash(secret=secret, notebook_id=notebook_id)
            page = page and os.path.join(folder, FEEDBACK, f"{page}.html")
            info["notebooks"].append({
                "notebook_id": notebook_id, "path": os.path.abspath(notebook),
                "has_local_feedback": False, "local_feedback_path": None,
                "feedback_updated": False,
                "has_exchange_feedback": bool(page) and os.path.isfile(page),
            })  # fmt: skip
        books = info["notebooks"]
        info["has_exchange_feedback"] = bool(books) and all(
            nb["has_exchange_feedback"] for nb in books
        )
        if not books:
            self.log.warning(f"No notebooks found in {printable(path)}")
        return info


WHOSE = ("course_id", "student_id", "assignment_id")  # nbgrader's list groups submissions by


def _whose(info: dict) -> tuple[str, ...]:
    return tuple(info[k] for k in WHOSE)


SECRET_BYTES = 1024  # a submission's secret: nbgrader writes 128 hexadecimal digits


def _not_listed(path: str, owner: str) -> str | None:
    """Why the inbound entry ``path`` in ``owner``'s folder is not theirs to list, or None."""
    claimed = named_for(os.path.basename(path))
    if claimed != owner:  # the collect's words for the entry it sets aside
        return f"it is named for {printable(claimed)} but is in the folder of {owner}"
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return "it is not a folder"
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    return None


def _text(path: str, limit: int) -> str | None:
    """A regular file's text, read as :func:`autograder.submission.read` does; None if none."""
    try:
        return read(path, limit).decode("utf-8", "replace")
    except (OSError, Refused):
        return None
