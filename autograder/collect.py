"""nbgrader's ``collect``, taking from its exchange only what students' own ``submit`` put there.

nbgrader's exchange keeps submissions in ``inbound``, a folder every student can write to. Its
``collect`` (the command, and formgrader's *Collect* button) takes a submission's student id and
time from the name of an entry there, copies the entry as the instructor's account with
``shutil.copytree`` — which follows symbolic links — and only *warns* when the entry's owner is
not the account it names. So a student writing there by hand could have the instructor's own
solutions (a link to them) collected as their submission; submit in another student's name, at a
later time, so that the other student is graded on it; and stop the collection of the whole class
with one entry that is not a folder, a name that holds no time, a named pipe, or a sparse file
larger than nbgrader's ``max_dir_size``.

:class:`CheckedCollect` is nbgrader's collect with those closed. An entry is set aside — named in
the log with the reason, the student's earlier collected submission, if any, kept — when its name
holds no time or an id grading refuses (:func:`autograder.submission.name_problems`), when it is
not a folder (a link to one is not), when ``ExchangeCollect.check_owner`` is on and it, or
anything in it, is not owned by the account it names, and when it holds anything but regular
files and folders, more than :data:`autograder.submission.MAX_FILES` entries, folders nested
deeper than :data:`MAX_DEPTH`, more bytes than nbgrader's ``max_dir_size`` or a ``timestamp.txt``
nbgrader cannot read (its collect and autograde stop on one). Entries in someone else's name are
set aside before the latest of each student is chosen, so a forged later one hides nothing; an
entry that cannot be copied does not hide the student's older ones. The copy opens every folder
and file relative to its parent's descriptor without following links, so what is checked is what
is copied even while the student changes the entry; it goes to a folder beside the destination,
which replaces the earlier submission only when complete. Files larger than ``max_file_size``
and names matching ``CourseDirectory.ignore``/``include`` are left out, as nbgrader leaves them
out. One student's entry never stops the collection of the others.

A submission's time is not only what it claims. nbgrader takes it from the entry's name (to
choose each student's latest, or the latest before the due date) and from the ``timestamp.txt``
inside (the gradebook's, from which a late penalty is counted), and a student writes both. What
no student can write is a file's change time (``st_ctime``): the kernel, or the file server,
sets it to its own clock whenever the file is made or changed, and only root can set it back. So
an entry whose files were last changed more than :attr:`CheckedCollect.grace_seconds` after the
time it claims is taken as submitted when they were last changed, and the log says so; its copy
in ``submitted/`` gets that time in its ``timestamp.txt``, whatever the student's said. A late
submission cannot claim to be on time; an honest one keeps its time to the microsecond.

The course's ``nbgrader_config.py`` selects it (``ExchangeFactory.collect``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch
from pathlib import Path

from dateutil.tz import gettz
from nbgrader.exchange.default.collect import ExchangeCollect, groupby
from nbgrader.utils import check_mode, parse_utc
from traitlets import Bool, Float

from autograder.student_folders import (
    INBOUND,
    STUDENTS,
    StudentFolders,
    inbound_entries,
    named_for,
)
from autograder.submission import (
    MAX_FILES,
    Refused,
    kind,
    name_problems,
    printable,
    shown,
    timestamp_problems,
)

MAX_DEPTH = 16  # folders inside a submission, one in another
TRIES = 5  # a student's newest entries tried, one after another, until one can be collected
_CHUNK = 2**20


class CheckedCollect(ExchangeCollect, StudentFolders):
    """nbgrader's ``ExchangeCollect`` that collects only students' own submissions (see module)."""

    grace_seconds = Float(
        120.0,
        min=0.0,
        help="Seconds a submission's files may be changed after the time it claims (nbgrader's "
        "submit copies them after taking its time; two clocks may be a little apart) before the "
        "time of the last change is taken as its time.",
    ).tag(config=True)

    trust_claimed_times = Bool(
        False,
        help="Take each submission's time from its name, as nbgrader does, even when its files "
        "were changed later. Only for an exchange copied or restored from a backup, which gives "
        "every file a new change time.",
    ).tag(config=True)

    def init_src(self) -> None:
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        records = []
        for path, folder in self._entries():
            try:
                records.append(self._record(path, folder))
            except Refused as why:
                self._set_aside(_shown(path, folder), why)
        self.duedate = self._duedate()
        # each student's entries in the order they are tried (_in_turn): nbgrader's choice first,
        # so that one that cannot be copied does not hide an older one
        self.candidates = [self._in_turn(v) for v in groupby(records, _student).values()]
        self.src_records = [entries[0] for entries in self.candidates]

    def _entries(self) -> list[tuple[str, str | None]]:
        """``(path, folder id)`` of every entry of the lesson in ``inbound`` (the folder id None),
        or, with student folders, in each student's own ``inbound``."""
        student, assignment = self.coursedir.student_id or "*", self.coursedir.assignment_id
        if self.enabled:  # every entry of a folder, named for anyone: set aside in _record
            return inbound_entries(self.course_path, student, assignment)
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        pattern = os.path.join(self.inbound_path, f"{student}+{assignment}+*")
        return [(path, None) for path in sorted(glob.glob(pattern))]

    def _record(self, path: str, folder: str | None = None) -> dict:
        """nbgrader's record of an ``inbound`` entry (in the student folder ``folder``, if any),
        or :class:`Refused` saying why it is none."""
        name = os.path.basename(path)
        parts = name.rsplit("+", 3)
        if len(parts) < 3:
            raise Refused("the name is not STUDENT+ASSIGNMENT+TIME[+RANDOM]")
        student = named_for(name)
        try:
            timestamp = parse_utc(parts[2])
        except (ValueError, OverflowError):
            raise Refused(f"the name holds no time ({printable(parts[2])!r})") from None
        found = name_problems(student, "the student id in its name")
        if found:
            raise Refused(found[0])
        if folder is not None and student != folder:
            raise Refused(f"it is named for {student} but is in the folder of {folder}")
        try:
            info = os.lstat(path)
        except OSError as error:  # gone since it was listed, say
            raise Refused(f"it cannot be read ({error.strerror})") from None
        if not stat.S_ISDIR(info.st_mode):
            raise Refused(f"it is {kind(info.st_mode)}, not a folder")
        if self.check_owner:
            _owned_by(info, student, "it")
        record = {"username": student, "filename": name, "timestamp": timestamp}
        seen = {"claimed": timestamp, "changed": _last_change(path, info)}
        return self._timed({**record, **seen, "path": path, "shown": _shown(path, folder)})

    def _timed(self, record: dict) -> dict:
        """``record`` with its time: the one it claims, or, when its files were last changed
        (``changed``, nanoseconds since the epoch) more than the grace after that, the time of
        that change (logged when it moves the time)."""
        if self.trust_claimed_times:
            return record
        last = datetime.fromtimestamp(record["changed"] / 1e9, UTC).replace(tzinfo=None)
        if last - record["claimed"] <= timedelta(seconds=self.grace_seconds):
            return record
        if last != record["timestamp"]:
            self.log.warning(
                f"{printable(record['shown'])} claims to be submitted at {_utc(record['claimed'])}"
                f", but its files were last changed at {_utc(last)}: taken as submitted then"
            )
        return {**record, "timestamp": last}

    def _duedate(self):
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                return gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                return None

    def _in_turn(self, records: list[dict]) -> list[dict]:
        """A student's entries, newest first; with ``--before-duedate``, those before the due
        date first (nbgrader chooses the newest of them), then the later ones."""
        records = self._sort_by_timestamp(records)
        if self.duedate is not None and self.before_duedate:
            early = [r for r in records if r["timestamp"] <= self.duedate]
            records = [*early, *(r for r in records if r["timestamp"] > self.duedate)]
        return records

    def copy_files(self) -> None:
        assignment, course = self.coursedir.assignment_id, self.coursedir.course_id
        if not self.src_records:
            self.log.warning(f"No submissions of '{assignment}' for course '{course}' to collect")
            return
        self.log.info(
            f"Processing {len(self.src_records)} submissions of '{assignment}' for course "
            f"'{course}'"
        )
        for entries in self.candidates:
            for record in entries[:TRIES]:
                try:
                    self._collect(record)
                    break
                except Refused as why:
                    self._set_aside(record["shown"], why)
                except Exception as error:  # noqa: BLE001 — one student's, never the class's
                    self._set_aside(record["shown"], Refused(f"{type(error).__name__}: {error}"))
            else:
                if entries[TRIES:]:
                    older = ", ".join(printable(r["shown"]) for r in entries[TRIES:])
                    self.log.error(f"Not tried, as {TRIES} newer ones of the same student were not "
                                   f"collected: {older}")  # fmt: skip

    def _collect(self, record: dict) -> None:
        """Copy one entry into ``submitted/``, in place of an older one (nbgrader's rules)."""
        student, assignment = record["username"], self.coursedir.assignment_id
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, assignment)
        if os.path.isdir(dest):
            existing = None if timestamp_problems(Path(dest)) else (
                self.coursedir.get_existing_timestamp(dest)
            )  # fmt: skip
            newer = existing is None or record["timestamp"] > existing
            other = self.before_duedate and existing != record["timestamp"]
            if not ((self.update and newer) or other):
                said = "No newer submission to collect" if self.update else (
                    "Submission already exists, use --update to update"
                )  # fmt: skip
                self.log.info(f"{said}: {student} {assignment}")
                return
            self.log.info(f"Updating submission: {student} {assignment}")
        else:
            self.log.info(f"Collecting submission: {student} {assignment}")
        submitted = os.path.join(self.coursedir.root, self.coursedir.submitted_directory)
        os.makedirs(submitted, exist_ok=True)
        part = tempfile.mkdtemp(prefix=f".collecting-{assignment}-", dir=submitted)
        try:
            owner = student if self.check_owner else None
            src = record["path"]
            limits = self._limits()
            _copy_entry(src, os.path.join(part, "copy"), owner, limits)
            found = timestamp_problems(Path(part) / "copy")
            if found:
                raise Refused(found[0])
            changed = max(record["changed"], limits.changed)  # since it was listed, say
            record = self._timed({**record, "changed": changed})
            self._write_time(Path(part) / "copy" / "timestamp.txt", record["timestamp"])
            for note in limits.left_out:
                self.log.warning(f"Left out of {printable(record['filename'])}: {note}")
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(os.path.join(part, "copy"), dest)
        finally:
            shutil.rmtree(part, ignore_errors=True)

    def _write_time(self, path: Path, when: datetime) -> None:
        """Write ``when`` (naive UTC) to ``path`` as nbgrader's submit writes a time, in place of
        what the student wrote there (autograde gives the gradebook that one)."""
        local = when.replace(tzinfo=UTC).astimezone(gettz(self.timezone))
        path.write_text(local.strftime(self.timestamp_format))

    def _limits(self) -> _Limits:
        c = self.coursedir
        return _Limits(1000 * c.max_dir_size, 1000 * c.max_file_size, c.ignore, c.include)

    def _set_aside(self, name: str, why: Refused) -> None:
        self.log.error(f"Not collected: {printable(name)}: {why}")


def _student(record: dict) -> str:
    return record["username"]


def _shown(path: str, folder: str | None) -> str:
    """How the log names an entry: its name, after its student folder's when it is in one."""
    name = os.path.basename(path)
    return f"{STUDENTS}/{folder}/{INBOUND}/{name}" if folder is not None else name


def _utc(when: datetime) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S} UTC"


def _last_change(path: str, info: os.stat_result) -> int:
    """The latest change time (``st_ctime_ns``) of the folder ``path`` (``info`` its ``lstat``)
    and of everything in it, links not followed, for at most ``MAX_FILES`` entries (an entry
    with more is refused when it is copied)."""
    latest, seen = info.st_ctime_ns, 0
    for _, folders, files, fd in os.fwalk(path, follow_symlinks=False):
        for name in [*folders, *files]:
            seen += 1
            if seen > MAX_FILES:
                return latest
            with contextlib.suppress(OSError):  # gone since it was listed
                latest = max(latest, os.stat(name, dir_fd=fd, follow_symlinks=False).st_ctime_ns)
    return latest


def _owned_by(info: os.stat_result, student: str, what: str) -> None:
    """:class:`Refused` unless ``info`` (an ``lstat``/``fstat``) is of the account ``student``."""
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = f"uid {info.st_uid}, no account"
    if owner != student:
        raise Refused(f"{what} is owned by {owner}, not by the account {student} it is named for")


@dataclass
class _Limits:
    """What one submission may hold, and what of it is not copied (nbgrader's settings)."""

    max_bytes: int  # in all (max_dir_size)
    max_file: int  # a larger file is left out (max_file_size)
    ignore: list[str]
    include: list[str]
    entries: int = 0  # seen so far
    copied: int = 0  # bytes, so far
    left_out: list[str] = field(default_factory=list)  # what was not copied, and why
    changed: int = 0  # the latest st_ctime_ns of what was copied, so far

    def saw(self, info: os.stat_result) -> None:
        """Count the change time of a folder or file being copied (an ``fstat`` of it)."""
        self.changed = max(self.changed, info.st_ctime_ns)

    def skipped(self, name: str, is_file: bool) -> bool:
        """nbgrader's ``ignore_patterns``: an ignored name, or a file no ``include`` glob keeps."""
        if any(fnmatch(name, pattern) for pattern in self.ignore):
            return True
        return is_file and not any(fnmatch(name, pattern) for pattern in self.include)

    def count(self) -> None:
        self.entries += 1
        if self.entries > MAX_FILES:
            raise Refused(f"it holds more than {MAX_FILES} files")

    def fits(self, size: int) -> None:
        """:class:`Refused` unless ``size`` more bytes fit."""
        if self.copied + size > self.max_bytes:
            raise Refused(f"it holds more than {self.max_bytes // 10**6} MB (max_dir_size)")

    def take(self, size: int) -> None:
        """Count ``size`` more bytes copied (a file may grow while it is read)."""
        self.fits(size)
        self.copied += size


def _copy_entry(src: str, dest: str, owner: str | None, limits: _Limits) -> None:
    """Copy the folder ``src`` to ``dest`` (new), never through a link; :class:`Refused` if
    anything in it is not a regular file or folder (of ``owner``, when given) or over a limit."""
    try:
        top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise Refused(f"it cannot be opened as a folder ({error.strerror})") from None
    try:
        _copy_folder(top, dest, "", owner, limits)
    except OSError as error:
        raise Refused(f"it cannot be copied ({error.strerror})") from None
    finally:
        os.close(top)


def _copy_folder(fd: int, dest: str, rel: str, owner: str | None, limits: _Limits) -> None:
    if owner is not None:
        _owned_by(os.fstat(fd), owner, rel or "it")
    if rel.count("/") >= MAX_DEPTH:
        raise Refused(f"{printable(rel)}: folders nested more than {MAX_DEPTH} deep")
    os.mkdir(dest)
    with os.scandir(fd) as entries:
        for entry in entries:
            name = entry.name
            path = f"{rel}/{name}" if rel else name
            limits.count()
            if shown(name) != name:
                raise Refused(f"{printable(path)}: the name is not valid UTF-8")
            mode = entry.stat(follow_symlinks=False).st_mode
            if limits.skipped(name, stat.S_ISREG(mode)):
                continue
            if stat.S_ISDIR(mode):
                child = _open(name, fd, os.O_DIRECTORY, path)
                try:
                    _copy_folder(child, os.path.join(dest, name), path, owner, limits)
                finally:
                    os.close(child)
            elif stat.S_ISREG(mode):
                _copy_file(name, fd, os.path.join(dest, name), path, owner, limits)
            else:
                raise _not_allowed(path, mode)
    limits.saw(os.fstat(fd))  # after its last entry was read: a change since shows


def _not_allowed(path: str, mode: int) -> Refused:
    return Refused(f"{printable(path)} is {kind(mode)}; a submission holds only files and folders")


def _open(name: str, fd: int, flags: int, path: str) -> int:
    """``name`` in the folder ``fd``, opened without following a link (one put there since it
    was looked at included)."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | flags, dir_fd=fd)
    except OSError as error:
        raise Refused(f"{printable(path)} cannot be opened ({error.strerror})") from None


def _copy_file(name: str, fd: int, dest: str, path: str, owner: str | None, limits: _Limits):
    src = _open(name, fd, 0, path)
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode):
            raise _not_allowed(path, info.st_mode)
        if owner is not None:
            _owned_by(info, owner, printable(path))
        if info.st_size > limits.max_file:  # left out, as nbgrader's own copy leaves it out
            mb = limits.max_file // 10**6
            limits.left_out.append(f"{printable(path)} is larger than {mb} MB (max_file_size)")
            return
        limits.fits(info.st_size)  # a sparse file over the limit is never read
        with open(dest, "xb") as out:
            while chunk := os.read(src, min(_CHUNK, limits.max_bytes - limits.copied + 1)):
                limits.take(len(chunk))
                out.write(chunk)
        limits.saw(os.fstat(src))  # after it was read: a change since shows
    finally:
        os.close(src)
