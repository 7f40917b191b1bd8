"""nbgrader's exchange, as a student who writes into it by hand sees it: collected, then graded.

nbgrader's ``inbound`` folder is writable by every student. ``nbgrader collect`` (and formgrader's
*Collect* button) takes a submission's student id and time from the name of what is there and
copies it as the instructor's account. Here a class submits lesson 01 with the real ``nbgrader
submit``; beside the honest submissions an attacker puts entries there by hand: one holding a link
to the instructor's solutions, a link in place of the folder, a named pipe, a sparse file, a plain
file, a name that is no submission's, too many files, folders too deep, an id that is markup —
and, as root (files owned by the accounts every Debian system has: ``daemon`` and ``sys`` submit,
``bin`` attacks), a submission in someone else's name that claims a later time, and one holding a
file of another account. The instructor collects with the course's ``nbgrader_config.py`` and
grades with ``attn-grade batch``. Every honest student must be collected as they submitted and keep
every point; every hand-made entry must be named in collect's log with why it was not collected;
nothing of it may reach ``submitted/``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from course import BIN, env, make_course, nbgrader
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc
from test_grade_students import student_notebook

from autograder import collect as collect_module
from autograder import submission, view
from autograder.submission import printable

LESSON = "01-scoring"
COURSE = "attention"
FUTURE = "2099-01-01 00:00:00.000000 UTC"  # a time no honest submission has yet
ROOT = os.geteuid() == 0
MAX_FILE_KB, MAX_DIR_KB = 1000, 2000  # nbgrader's limits for the class sharing one account

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson01,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def _entry(inbound: Path, student: str, when: str = FUTURE, tail: str = "handmade") -> Path:
    """A folder in ``inbound`` named as ``nbgrader submit`` names one, holding a notebook."""
    folder = inbound / f"{student}+{LESSON}+{when}+{tail}"
    folder.mkdir()
    nbformat.write(student_notebook(LESSON, "release"), folder / f"{LESSON}.ipynb")
    (folder / "timestamp.txt").write_text(when)
    return folder


def _solution(course: Path) -> Path:
    return course / "solutions" / LESSON / f"{LESSON}.ipynb"


def _link_to_solutions(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "link-inside")
    (folder / f"{LESSON}.ipynb").unlink()
    os.symlink(_solution(course), folder / f"{LESSON}.ipynb")
    return folder


def _folder_is_a_link(inbound: Path, course: Path) -> Path:
    folder = inbound / f"link-folder+{LESSON}+{FUTURE}+handmade"
    os.symlink(_solution(course).parent, folder)
    return folder


def _named_pipe(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "pipe")
    os.mkfifo(folder / "data.csv")
    return folder


def _sparse_file(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "sparse")
    with open(folder / "weights.bin", "wb") as f:
        f.truncate(4 * 2**30)  # 4 GiB that take no disk
    return folder


def _too_much(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "too-much")
    for n in range(3):  # each under max_file_size, together over max_dir_size
        with open(folder / f"part{n}.bin", "wb") as f:
            f.truncate(MAX_FILE_KB * 900)
    return folder


def _plain_file(inbound: Path, course: Path) -> Path:
    path = inbound / f"plain-file+{LESSON}+{FUTURE}+handmade"
    path.write_text("not a folder")
    return path


def _no_time(inbound: Path, course: Path) -> Path:
    return _entry(inbound, "no-time", when="yesterday")


def _many_files(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "many-files")
    for n in range(submission.MAX_FILES + 1):
        (folder / f"f{n}.txt").write_text("x")
    return folder


def _deep(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "deep")
    (folder / "/".join(["d"] * 40)).mkdir(parents=True)
    return folder


def _in_someone_elses_name(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "honest-b")  # later than honest-b's own submission
    os.mkfifo(folder / "data.csv")
    return folder


def _unreadable_time(inbound: Path, course: Path) -> Path:
    folder = _entry(inbound, "bad-time-file")
    (folder / "timestamp.txt").write_text("tomorrow")  # nbgrader stops on it at the next collect
    return folder


FAKE_LINE = "[CollectApp | INFO] Collecting submission: honest-a 01-scoring"


def _line_in_its_id(inbound: Path, course: Path) -> Path:
    return _entry(inbound, f"x\n{FAKE_LINE}\r")  # a line of the log of its own, if printed


def _many_tries(inbound: Path, course: Path) -> Path:
    """Seven entries of one student, each holding a named pipe: five are tried, newest first."""
    for n in range(7):
        folder = _entry(inbound, "many-tries", when=f"2098-01-0{n + 1} 00:00:00.000000 UTC")
        os.mkfifo(folder / "data.csv")
    return folder  # the newest


def _markup_id(inbound: Path, course: Path) -> Path:
    return _entry(inbound, 'x"<b>')


# name -> (how the attacker plants it, what collect's log must say of it)
ATTACKS = {
    "link-inside": (_link_to_solutions, "symbolic link"),
    "link-folder": (_folder_is_a_link, "symbolic link"),
    "pipe": (_named_pipe, "named pipe"),
    "sparse": (_sparse_file, "max_file_size"),  # the file is left out, as nbgrader leaves it out
    "too-much": (_too_much, "max_dir_size"),
    "plain-file": (_plain_file, "not a folder"),
    "no-time": (_no_time, "time"),
    "many-files": (_many_files, f"more than {submission.MAX_FILES} files"),
    "deep": (_deep, "deep"),
    "bad-time-file": (_unreadable_time, "not a submission time"),
    'x"<b>': (_markup_id, "formgrader"),
    "line-in-its-id": (_line_in_its_id, "control character or line break"),
    "many-tries": (_many_tries, "named pipe"),
    "in-honest-b's-name": (_in_someone_elses_name, "named pipe"),  # honest-b's own is collected
}


def _account(name: str) -> tuple[int, int]:
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def _chown_tree(path: Path, owner: str) -> None:
    uid, gid = _account(owner)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
    os.chown(path, uid, gid, follow_symlinks=False)


def _submit(tmp: Path, exchange: Path, student: str) -> Path:
    """``nbgrader submit`` of a right answer for ``student``, as a student's server runs it."""
    home = tmp / "students" / student
    (home / LESSON).mkdir(parents=True)
    nbformat.write(student_notebook(LESSON, {}), home / LESSON / f"{LESSON}.ipynb")
    done = subprocess.run(
        [str(BIN / "nbgrader"), "submit", LESSON, "--course", COURSE,
         f"--Exchange.root={exchange}", f"--CourseDirectory.student_id={student}"],
        cwd=home, env=env(JUPYTER_DATA_DIR=str(home / ".data")), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"nbgrader submit as {student}:\n{done.stderr}"
    return home / LESSON / f"{LESSON}.ipynb"


def _class(tmp: Path, honest: list[str], check_owner: bool):
    """A course whose class submitted through the exchange, with the attacks beside, collected
    and graded: (course, collect's log, {student: their notebook}, {attack: its entry})."""
    course = make_course(tmp / "course", [LESSON])
    exchange = tmp / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)  # as the hub makes it (deploy/jupyterhub_config.py)
    flags = [f"--Exchange.root={exchange}", f"--ExchangeCollect.check_owner={check_owner}"]
    if not check_owner:
        flags += [f"--CourseDirectory.max_file_size={MAX_FILE_KB}",
                  f"--CourseDirectory.max_dir_size={MAX_DIR_KB}"]  # fmt: skip
    done = nbgrader(course, "release_assignment", LESSON, *flags[:1])
    assert done.returncode == 0, done.stderr
    inbound = exchange / COURSE / "inbound"
    notebooks = {student: _submit(tmp, exchange, student) for student in honest}
    planted = {}
    if check_owner:
        for student in honest:  # as if each had submitted from their own account
            (entry,) = inbound.glob(f"{student}+{LESSON}+*")
            _chown_tree(entry, student)
        # bin, in daemon's name, at a later time than daemon's own submission
        planted["forged"] = _entry(inbound, "daemon")
        # bin's own submission, its notebook a file of another account (a hard link, where the
        # kernel allows linking what one does not own)
        planted["foreign-file"] = _entry(inbound, "bin")
        for entry in planted.values():
            _chown_tree(entry, "bin")
        os.chown(planted["foreign-file"] / f"{LESSON}.ipynb", *_account("sys"))
    else:
        planted = {name: plant(inbound, course) for name, (plant, _) in ATTACKS.items()}
        # honest-a was collected before, by nbgrader's own collect, with a time it cannot read
        # (on which nbgrader's --update stops for the whole class): the new one replaces it
        earlier = course / "submitted" / honest[0] / LESSON
        earlier.mkdir(parents=True)
        (earlier / "timestamp.txt").write_text("garbage")
        flags.append("--update")
    collect = nbgrader(course, "collect", LESSON, *flags, timeout=300)
    return course, collect, notebooks, planted


def _graded(course: Path) -> dict[str, float]:
    """Each collected student's score from ``attn-grade batch``, as the gradebook has it."""
    done = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json"],
        cwd=course, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    json.loads(done.stdout)  # the batch's report parses
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(LESSON)}


def _full(course: Path) -> float:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE) as gb:
        return gb.find_assignment(LESSON).max_score


@pytest.fixture(scope="module")
def shared_account(tmp_path_factory):
    """Every server as one account (the demo; ``jovyan`` on Kubernetes): ownership says nothing."""
    return _class(tmp_path_factory.mktemp("collect-shared"), ["honest-a", "honest-b"], False)


@pytest.fixture(scope="module")
def own_accounts(tmp_path_factory):
    """One account per student (a hub on one machine): what ownership can tell, as root."""
    if not ROOT:
        pytest.skip("needs root: the submissions are files of other accounts (daemon, sys, bin)")
    return _class(tmp_path_factory.mktemp("collect-accounts"), ["daemon", "sys"], True)


@pytest.mark.parametrize("setup", ["shared_account", "own_accounts"])
def test_every_honest_student_is_collected_as_submitted_and_keeps_every_point(setup, request):
    course, collect, notebooks, _ = request.getfixturevalue(setup)
    assert collect.returncode == 0, f"collect failed for the whole class:\n{collect.stderr}"
    for student, notebook in notebooks.items():
        got = course / "submitted" / student / LESSON / f"{LESSON}.ipynb"
        assert got.read_bytes() == notebook.read_bytes(), f"{student}'s submission is not theirs"
    scores = _graded(course)
    for student in notebooks:
        assert scores.get(student) == _full(course), f"{student}: {scores}"


@pytest.mark.parametrize("name", [*ATTACKS, "forged", "foreign-file"])
def test_a_hand_made_entry_is_named_and_nothing_of_it_is_collected(name, request):
    setup = "shared_account" if name in ATTACKS else "own_accounts"
    course, collect, notebooks, planted = request.getfixturevalue(setup)
    entry = planted[name]
    said = [line for line in collect.stderr.splitlines() if printable(entry.name) in line]
    assert said, f"collect's log does not name {entry.name}:\n{collect.stderr}"
    why = ATTACKS[name][1] if name in ATTACKS else "owned by"
    assert any(why in line for line in said), f"{entry.name}: {said}"
    student = entry.name.split("+")[0]
    if student in notebooks:  # the forged one: the student keeps their own submission
        return
    if name == "sparse":  # collected without the file over max_file_size
        got = course / "submitted" / student / LESSON
        assert sorted(p.name for p in got.iterdir()) == [f"{LESSON}.ipynb", "timestamp.txt"]
        return
    assert not (course / "submitted" / student).exists(), f"{name} was collected"


def test_no_name_makes_a_line_of_the_log_of_its_own(shared_account):
    """(The command's log indents the lines of a message after its first; formgrader's page
    of the log does not.) honest-a's real line says "Updating", as it was collected before."""
    collect = shared_account[1]
    assert not [line for line in collect.stderr.splitlines() if line.lstrip().startswith(FAKE_LINE)]


def test_a_student_with_many_entries_that_cannot_be_collected_costs_five_tries(shared_account):
    collect = shared_account[1]
    lines = collect.stderr.splitlines()
    tried = [
        line for line in lines if line.startswith("[CollectApp | ERROR] Not collected: many-tries+")
    ]
    assert len(tried) == collect_module.TRIES == 5, tried
    assert tried[0].split("+")[2].startswith("2098-01-07"), "the newest first"
    (untried,) = [line for line in lines if "Not tried" in line]
    assert "2098-01-02" in untried and "2098-01-01" in untried, untried


def test_a_sparse_file_over_the_limit_is_refused_unread(tmp_path):
    entry = tmp_path / "entry"
    entry.mkdir()
    with open(entry / "weights.bin", "wb") as f:
        f.truncate(3 * 10**6)
    limits = collect_module._Limits(2 * 10**6, 10 * 10**6, [], ["*"])
    with pytest.raises(submission.Refused, match="more than 2 MB"):
        collect_module._copy_entry(str(entry), str(tmp_path / "copy"), None, limits)
    assert limits.copied == 0


def test_nothing_collected_is_a_link_or_anything_but_files_and_folders(shared_account):
    course = shared_account[0]
    for dirpath, dirnames, filenames in os.walk(course / "submitted"):
        for name in [*dirnames, *filenames]:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), f"{dirpath}/{name}: {mode:o}"


@pytest.mark.parametrize("swapped", ["file", "folder"])
def test_what_is_swapped_for_a_link_after_it_was_looked_at_is_not_followed(
    swapped, tmp_path, monkeypatch
):
    """The student owns their entry and can change it while it is copied: a file or folder
    replaced by a link between being listed and being opened is refused, never read through."""
    collect = collect_module
    secret = tmp_path / "instructor-only.txt"
    secret.write_text("the instructor's")
    entry = tmp_path / "entry"
    (entry / "data").mkdir(parents=True)
    (entry / "notes.txt").write_text("mine")
    target = "notes.txt" if swapped == "file" else "data"
    real_open = collect._open

    def swap_then_open(name, fd, flags, path):
        if name == target:
            victim = entry / name
            shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
            victim.symlink_to(secret if swapped == "file" else tmp_path)
        return real_open(name, fd, flags, path)

    monkeypatch.setattr(collect, "_open", swap_then_open)
    limits = collect._Limits(10**6, 10**6, [], ["*"])
    with pytest.raises(submission.Refused, match=f"{target} cannot be opened"):
        collect._copy_entry(str(entry), str(tmp_path / "copy"), None, limits)
    copied = [p.read_text() for p in (tmp_path / "copy").rglob("*") if p.is_file()]
    assert "the instructor's" not in copied


def test_before_the_due_date_an_entry_that_cannot_be_collected_falls_back_to_an_earlier_one(
    tmp_path,
):
    """With ``--before-duedate``, the newest entry before the due date holds a named pipe: the
    one before it is collected, not the one after the due date."""
    course = make_course(tmp_path / "course", [LESSON])
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)
    due = nbgrader(course, "db", "assignment", "add", LESSON, "--duedate=2098-01-04 00:00:00 UTC")
    assert due.returncode == 0, due.stderr
    assert (
        nbgrader(course, "release_assignment", LESSON, f"--Exchange.root={exchange}").returncode
        == 0
    )
    inbound = exchange / COURSE / "inbound"
    for day in (2, 3, 5):
        folder = _entry(inbound, "due", when=f"2098-01-0{day} 00:00:00.000000 UTC")
        (folder / "day.txt").write_text(str(day))
    os.mkfifo(inbound / f"due+{LESSON}+2098-01-03 00:00:00.000000 UTC+handmade" / "data.csv")
    collect = nbgrader(course, "collect", LESSON, "--before-duedate", f"--Exchange.root={exchange}",
                       "--ExchangeCollect.check_owner=False")  # fmt: skip
    assert collect.returncode == 0, collect.stderr
    assert (course / "submitted" / "due" / LESSON / "day.txt").read_text() == "2", collect.stderr


def _time_of(submitted: Path):
    """The time nbgrader's autograde gives the gradebook for a collected submission."""
    return parse_utc((submitted / "timestamp.txt").read_text())


def test_a_late_submission_that_claims_to_be_on_time_is_taken_as_submitted_when_it_arrived(
    tmp_path,
):
    """A student submits on time with nbgrader's own submit; after the due date, they put a
    better notebook in by hand under a time before it (in its name, and an earlier one still in
    its ``timestamp.txt``, which nbgrader's autograde would give the gradebook). Its files'
    change time, which no student can set, says when it arrived: it is collected as
    late (the gradebook counts the seconds), and ``--before-duedate`` takes the honest one. With
    nbgrader's rule (``trust_claimed_times``) the claim would stand: it is the change times that
    tell."""
    course = make_course(tmp_path / "course", [LESSON])
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)
    flags = [f"--Exchange.root={exchange}", "--ExchangeCollect.check_owner=False"]
    assert nbgrader(course, "release_assignment", LESSON, flags[0]).returncode == 0
    _submit(tmp_path, exchange, "late")
    inbound = exchange / COURSE / "inbound"
    (honest,) = inbound.glob(f"late+{LESSON}+*")
    claimed = parse_utc(honest.name.split("+")[2])
    arrived = max(path.lstat().st_ctime for path in [honest, *honest.rglob("*")])
    due = datetime.fromtimestamp(arrived + 1, UTC)
    done = nbgrader(
        course, "db", "assignment", "add", LESSON, f"--duedate={due:%Y-%m-%d %H:%M:%S.%f} UTC"
    )
    assert done.returncode == 0, done.stderr
    time.sleep(max(0.0, arrived + 3 - time.time()))  # two seconds after the due date
    claim = f"{due - timedelta(seconds=0.5):%Y-%m-%d %H:%M:%S.%f} UTC"  # after the honest one
    forged = _entry(inbound, "late", when=claim)
    (forged / "better.txt").write_text("made after the due date")
    (forged / "timestamp.txt").write_text(f"{due - timedelta(days=1):%Y-%m-%d %H:%M:%S.%f} UTC")

    def collect(*more: str) -> str:
        done = nbgrader(course, "collect", LESSON, *flags, "--CheckedCollect.grace_seconds=1",
                        "--update", *more)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr

    got = course / "submitted" / "late" / LESSON
    log = collect()
    assert (got / "better.txt").exists(), "the newest entry is the one collected"
    taken = _time_of(got)
    assert taken > due.replace(tzinfo=None), f"collected as submitted at {taken}, due {due}"
    said = [line for line in log.splitlines() if forged.name in line]
    assert any("but its files were last changed at" in line for line in said), log
    assert honest.name not in log, "the honest entry's time is its own"
    scores = _graded(course)
    assert "late" in scores
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE) as gb:
        graded = gb.find_submission(LESSON, "late")
        assert graded.timestamp == taken and graded.total_seconds_late > 0, graded.to_dict()

    collect("--before-duedate")
    assert not (got / "better.txt").exists(), "before the due date, only the honest one"
    assert _time_of(got) == claimed, "an honest submission keeps its time to the microsecond"

    collect("--before-duedate", "--CheckedCollect.trust_claimed_times=True")
    assert (got / "better.txt").exists(), "by its claim alone, the forged one was on time"
    assert _time_of(got) == parse_utc(claim), "one time: its name's, not its timestamp.txt's"


def test_a_file_changed_while_its_entry_is_copied_counts_with_its_new_change_time(
    tmp_path, monkeypatch
):
    """The time is decided from what was copied: a file the student rewrites between the entry
    being listed and the file being read shows its new change time."""
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "notes.txt").write_text("first")
    listed = collect_module._last_change(str(entry), os.lstat(entry))
    real_open = collect_module._open

    def rewrite_then_open(name, fd, flags, path):
        time.sleep(0.01)
        (entry / name).write_text("rewritten")
        return real_open(name, fd, flags, path)

    monkeypatch.setattr(collect_module, "_open", rewrite_then_open)
    limits = collect_module._Limits(10**6, 10**6, [], ["*"])
    collect_module._copy_entry(str(entry), str(tmp_path / "copy"), None, limits)
    assert (tmp_path / "copy" / "notes.txt").read_text() == "rewritten"
    assert limits.changed == os.stat(entry / "notes.txt").st_ctime_ns > listed
