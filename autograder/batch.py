"""``attn-grade batch``: nbgrader's autograde for a class, in parallel, each submission isolated.

The grading is nbgrader's own. For each student, the batch runs nbgrader's ``Autograde`` converter
through its public API (a ``CourseDirectory`` whose ``student_id`` is that student, then
``start()``), with the course pipeline of :mod:`autograder.nbgrader_plugin` — the pipeline plain
``nbgrader autograde`` uses with the course's configuration — so both give the same scores, and
``nbgrader export``, ``generate_feedback`` and formgrader read what they always read.

What the batch adds:

* every submission is checked before nbgrader touches it (:mod:`autograder.submission`): one
  holding a link, a special file or an unspellable name is *refused* and reported, and nothing of
  it is read or copied;
* a pool of trusted workers (:mod:`autograder.pool`: local processes, or a Dask cluster's
  workers) grades the submissions ahead of nbgrader's
  loop, which finds each result ready: :class:`~autograder.nbgrader_plugin.TrustedExecute` takes
  a result only for exactly the notebook and files it was given, and grades anything else itself;
* a neighbour spinning on every core can make a student run out of time, where a sandbox has
  no CPU quota (:class:`~autograder.limits.Cgroup`: no CPU controller we may use, as a normal
  user, or ``--cpus 0``) and even under one: each student who ran out of time while others were
  graded beside it, kept from a processor (:data:`autograder.runner.STARVED`), is graded again
  at the end, alone, and the second grade stands (``regraded``);
* a journal (``COURSE/.attn-grade/LESSON.jsonl``): a batch killed half-way and rerun grades only
  the students it had not finished, anyone whose submission changed, anyone whose due date
  changed (a new due date or an extension: nbgrader decides the late penalty when it grades),
  and, when the late penalty itself changed, every student who was late;
* a summary, ``--json``/``--csv``, and Markdown feedback per student (:mod:`autograder.feedback`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import sys
import time
import types
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.apps.autogradeapp import AutogradeApp
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory

from . import names, nbgrader_plugin, notebook_format, spreadsheet, submission
from .gradebook_engine import one_engine
from .journal import Journal, stamp_of
from .limits import Limits
from .pool import Pool, PoolError, start

# ---------------------------------------------------------------------------------------------
# one batch


@dataclass
class StudentResult:
    student: str
    status: str  # graded | skipped | refused | error
    score: float | None = None  # after nbgrader's late penalty, if any (its export's "score")
    max_score: float | None = None
    raw_score: float | None = None  # what the answers earned
    late_submission_penalty: float = 0.0  # nbgrader's LateSubmissionPlugin, from the due date
    seconds_late: float = 0.0  # after the due date (and the student's extension, if any)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    error: str = ""
    regraded: bool = False  # graded again, alone (see REGRADED)
    crowded: bool = field(default=False, repr=False)  # see engine.Graded.crowded

    def as_dict(self) -> dict:
        return {
            "student": self.student,
            "status": self.status,
            "score": self.score,
            "max_score": self.max_score,
            "raw_score": self.raw_score,
            "late_submission_penalty": self.late_submission_penalty,
            "seconds_late": self.seconds_late,
            "seconds": self.seconds,
            "problems": self.problems,
            "error": self.error,
            "regraded": self.regraded,
        }


CROWDED = "out of time beside others, kept waiting for a processor"
REGRADED = f"graded again alone: {CROWDED}"


@dataclass
class BatchOptions:
    workers: int = 2
    limits: Limits = field(default_factory=Limits)
    isolation: str = "namespaces"
    force: bool = False
    progress: bool = True
    feedback: bool = True
    log_level: str = "ERROR"
    dask: str | None = None  # a Dask scheduler address, or "local:N"
    student: str = "*"  # only these students: an id, or a glob (nbgrader's --student)


@dataclass
class _Todo:
    name: str  # the folder name, as the file system has it
    folder: Path
    stamp: str
    due: str | None  # the student's due date as the batch started (see due_dates)
    why: str  # why a student graded before is graded again (a note in the results), or ""
    jobs: dict = field(default_factory=dict)  # notebook → (fingerprint, future)
    refused: list[str] = field(default_factory=list)  # notebooks nbformat would not take


def run_batch(
    course: Path, lesson: str, options: BatchOptions, pool: Pool | None = None
) -> list[StudentResult]:
    """Grade every ``submitted/*/LESSON`` of ``course``; see the module doc. ``pool`` is a local
    pool already warming for this lesson (:func:`autograder.pool.start`); the batch closes it."""
    course = Path(course).resolve()
    here = os.getcwd()
    os.chdir(course)
    try:
        return _run(course, lesson, options, pool)
    finally:
        if pool is not None:
            pool.close()
        AutogradeApp.clear_instance()  # the batch's nbgrader app (see _app) ends with it
        os.chdir(here)


def _app(lesson: str, log_level: str) -> AutogradeApp:
    """nbgrader's autograde app with the course's config, and the trusted pipeline forced."""
    AutogradeApp.clear_instance()
    app = AutogradeApp.instance()
    app.initialize([lesson, f"--log-level={log_level}"])
    nbgrader_plugin.trusted_pipeline(app.config)
    app.coursedir.assignment_id = lesson
    return app


def _limits_for_nbgrader(app: AutogradeApp, limits: Limits, isolation: str) -> None:
    """The batch's limits for anything TrustedExecute grades itself (one engine, one set)."""
    config = app.config.TrustedExecute
    config.timeout, config.budget = limits.timeout, limits.budget
    config.memory_mb, config.processes = limits.memory_mb, limits.processes
    config.cpus, config.secret_problems = limits.cpus, limits.secret_problems
    config.max_output, config.isolation = limits.max_output, isolation


def _run(
    course: Path, lesson: str, options: BatchOptions, pool: Pool | None
) -> list[StudentResult]:
    from tqdm import tqdm

    app = _app(lesson, options.log_level)
    _limits_for_nbgrader(app, options.limits, options.isolation)
    submissions = _submissions(app.coursedir, lesson)
    if not submissions:  # before anything is written: a mistyped lesson leaves no trace
        raise names.nothing_matches(
            app.coursedir, app.coursedir.submitted_directory, lesson, "nobody has submitted it yet"
        )
    if options.student != "*":
        where = app.coursedir.format_path(app.coursedir.submitted_directory, "*", lesson)
        chosen = set(names.chosen_students((n for n, _ in submissions), options.student, where))
        submissions = [(name, folder) for name, folder in submissions if name in chosen]
    notebooks = names.released_notebooks(app.coursedir, lesson)
    journal = Journal(course, lesson)
    if options.force:
        journal.forget(
            None if options.student == "*" else [submission.shown(n) for n, _ in submissions]
        )
    due, rule = due_dates(app.coursedir, lesson), penalty_rule(app)
    secret = options.limits.secret_problems > 0
    results, todo, moved, rerated, resecret = [], [], [], {}, []
    for name, folder in submissions:
        shown = submission.shown(name)
        found = submission.problems(folder, folder.parent, notebooks)
        if found:
            results.append(
                StudentResult(submission.printable(name), "refused", error="; ".join(found))
            )
            continue
        stamp = stamp_of(folder)
        if journal.done(shown, stamp) and _autograded_exists(app.coursedir, lesson, name):
            entry = journal.entries[shown]
            if entry.get("due", due(name)) != due(name):  # (a line from before: not moved)
                change = f"{when(entry['due'])} → {when(due(name))}"
                moved.append(f"{shown} ({change})")
                why = "graded again: a new due date"
            elif _rerated(entry, rule):
                rerated[shown] = entry["penalty"]
                why = "graded again: a new late penalty"
            elif bool(entry.get("secret")) != secret:  # (a line from before: graded without)
                resecret.append(shown)
                why = f"graded again: secret problems turned {'on' if secret else 'off'}"
            else:
                results.append(StudentResult(shown, "skipped", **_grade_of(entry)))
                continue
        else:
            why = ""
        todo.append(_Todo(name, folder, stamp, due(name), why))
    if moved:
        print(MOVED.format(n=len(moved), who=_some(moved)), file=sys.stderr)
    if rerated:
        was = " / ".join(sorted(set(rerated.values())))
        who = _some(list(rerated))
        print(RERATED.format(n=len(rerated), was=was, now=rule, who=who), file=sys.stderr)
    if resecret:
        turned = "on" if secret else "off"
        print(RESECRET.format(n=len(resecret), turned=turned, who=_some(resecret)),
              file=sys.stderr)  # fmt: skip
    if not todo:
        return sorted(results, key=lambda r: r.student)
    if secret:
        print(SECRETS.format(n=options.limits.secret_problems), file=sys.stderr)

    pool = pool or start(lesson, options.workers, options.isolation, options.dask)
    workers = pool.workers if options.dask else max(1, options.workers)
    bar = tqdm(total=len(todo), desc=f"grading {lesson}", unit="student",
               disable=not options.progress, leave=False)  # fmt: skip
    ahead: deque[_Todo] = deque()
    recorded: set[str] = set()  # the students graded and journaled by this run

    def lookup(student: str, notebook: str, nb: dict, files: dict) -> dict | None:
        for item in ahead:
            if item.name == student and notebook in item.jobs:
                fingerprint, future = item.jobs[notebook]
                if fingerprint == nbgrader_plugin.fingerprint(nb, files):
                    return pool.outcome(future)  # None, the pool lost: graded here
        return None

    def grade(items: list[_Todo], window: int, final: bool) -> list[tuple[_Todo, StudentResult]]:
        """Grade ``items`` in order, ``window`` of them sent to the pool ahead of nbgrader. Unless
        ``final``, a result to be graded again alone is not journaled (a rerun grades it)."""
        graded, waiting = [], iter(items)
        while True:
            while len(ahead) < window:
                item = next(waiting, None)
                if item is None:
                    break
                _prefetch(app, lesson, notebooks, item, pool, options.limits)
                ahead.append(item)
            if not ahead:
                return graded
            item = ahead[0]
            if item.refused:  # as the bounds are: nbgrader would stop on it, saying less
                shown = submission.printable(item.name)
                result = StudentResult(shown, "refused", error="; ".join(item.refused))
            else:
                result = _grade_student(app, course, lesson, item, options)
            if item.why:
                result.problems.insert(0, item.why)
            ahead.popleft()
            item.jobs.clear()  # its graded notebooks: memory by the window, not the class
            forget(item.name)
            graded.append((item, result))
            bar.update(1)
            if not (result.crowded and not final):
                journal.mark({
                    "student": result.student, "status": result.status, "stamp": item.stamp,
                    "due": item.due, "penalty": rule, "secret": secret,
                    **_grade_of(result.as_dict()), "error": result.error, "at": time.time(),
                })  # fmt: skip
                recorded.add(item.name)
            if pool.lost:  # the student in hand was graded here; the rest wait for a rerun
                left = len(todo) - len(recorded)
                raise PoolError(LOST.format(lost=pool.lost, n=len(recorded), left=left))

    try:
        with (
            nbgrader_plugin.supply(lookup=lookup),
            nbgrader_plugin.sanitizing_ahead() as forget,
            one_engine(),
        ):
            # Out of time while others ran beside it, kept waiting for the processor its quota
            # allowed (or one, with no quota): a neighbour that took the processors may be to
            # blame. Once the class is done, each such student is graded again with no other
            # sandbox running.
            beside = workers > 1
            graded = {i.name: r for i, r in grade(todo, 2 * workers + 1, final=not beside)}
            again = [item for item in todo if beside and graded[item.name].crowded]
            bar.total += len(again)
            for item, result in grade(again, 1, final=True):
                result.regraded = True
                result.problems.insert(0, REGRADED)
                graded[item.name] = result
            results += graded.values()
    finally:
        bar.close()
        pool.close()
    return sorted(results, key=lambda r: r.student)


LOST = (
    "{lost}: {n} student(s) graded, {left} not yet; run the batch again to grade them (those "
    "graded are kept)"
)
MOVED = (
    "attn-grade batch: grading {n} student(s) again, whose due date changed since they were "
    "graded (a new due date for the lesson, or an extension): {who}"
)


def due_dates(coursedir: CourseDirectory, lesson: str) -> Callable[[str], str | None]:
    """``due(student)``: the student's due date of ``lesson`` now, as nbgrader counts lateness
    from it (the lesson's due date, plus the student's extension), as ISO text; None without one.

    nbgrader's late penalty is decided when a notebook is graded, from the due date then. The
    batch keeps the due date it graded each student with (the journal's ``due``), and a student
    whose due date has changed since is graded again, so the penalty follows the new one."""
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        assignment = gb.find_assignment(lesson)
        lesson_due = _iso(assignment.duedate)
        each = {}
        for found in assignment.submissions:
            with contextlib.suppress(TypeError):  # an extension to a lesson with no due date
                each[found.student_id] = _iso(found.duedate)
    return lambda student: each.get(student, lesson_due)


RERATED = (
    "attn-grade batch: grading {n} late student(s) again, as the late penalty changed since they "
    "were graded ({was} → {now}): {who}"
)
SECRETS = (
    "attn-grade batch: grading with {n} secret problems an exercise, drawn for this batch "
    "alone (docs/grading.md, 'Secret problems')"
)
RESECRET = (
    "attn-grade batch: grading {n} student(s) again, as secret problems were turned {turned} since "
    "they were graded (docs/grading.md, 'Secret problems'): {who}"
)


def penalty_rule(app: AutogradeApp) -> str | None:
    """The late penalty nbgrader applies now, as text: the plugin ``AssignLatePenalties`` builds,
    with its configured values (``LateSubmissionPlugin(penalty_method='zero')``), and for a
    course's own plugin a fingerprint of its code (``Docked() code 1f0c…``, :func:`own_code`).
    None if it cannot be built: then nbgrader cannot grade either, and says why.

    Like the due date, the penalty is decided when a notebook is graded. The batch keeps the rule
    it graded each student with (the journal's ``penalty``), and when the rule has changed since,
    every student who was late then is graded again (nobody on time: nbgrader asks the plugin
    only about late submissions)."""
    from nbgrader.preprocessors import AssignLatePenalties

    try:
        step = AssignLatePenalties(config=app.config)
        step.init_plugin()
    except Exception:  # noqa: BLE001
        return None
    plugin = step.plugin_inst
    values = ", ".join(
        f"{k}={getattr(plugin, k)!r}" for k in sorted(plugin.trait_names(config=True))
    )
    code = own_code(type(plugin))
    return f"{type(plugin).__name__}({values})" + (f" code {code}" if code else "")


LIBRARIES = ("nbgrader.", "traitlets.")  # their plugins' code changes only with a new version


def own_code(plugin: type) -> str:
    """A fingerprint of what a course's own late-penalty plugin runs: the methods and plain
    values of each of its classes that is not nbgrader's or traitlets' (one defined in
    ``nbgrader_config.py`` included), by their bytecode, names and constants, not by where they
    lie in their file or by their docstrings. "" for nbgrader's own plugins. Code the methods
    call outside their classes is not in it: a change there needs ``--force``."""
    own = [k for k in plugin.__mro__ if k is not object and not k.__module__.startswith(LIBRARIES)]
    if not own:
        return ""
    digest = hashlib.sha256()
    for klass in own:
        digest.update(klass.__qualname__.encode() + b"\0")
        for name, value in sorted(vars(klass).items()):
            if name == "__doc__":
                continue
            digest.update(name.encode() + b"\0" + _code_of(value) + b"\0")
    return digest.hexdigest()[:12]


def _code_of(value: object, doc: object = None) -> bytes:
    """The part of a class attribute that decides what it does (see :func:`own_code`); ``doc``:
    a function's docstring, left out of its code's constants."""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        return b"|".join(_code_of(f) for f in (value.fget, value.fset, value.fdel))
    if isinstance(value, types.FunctionType):
        defaults = b"".join(map(_code_of, value.__defaults__ or ()))
        return _code_of(value.__code__, value.__doc__) + defaults
    if isinstance(value, types.CodeType):
        consts = b",".join(_code_of(c) for c in value.co_consts if doc is None or c is not doc)
        return value.co_code + repr(value.co_names).encode() + b"[" + consts + b"]"
    if isinstance(value, tuple):
        return b"(" + b",".join(map(_code_of, value)) + b")"
    if isinstance(value, frozenset | set):  # in sorted order: a set's own depends on PYTHONHASHSEED
        return b"{" + b",".join(sorted(map(_code_of, value))) + b"}"
    if isinstance(value, int | float | complex | str | bytes | type(None) | type(Ellipsis)):
        return repr(value).encode()
    return b""  # a trait: its value is in the rule's settings


def _rerated(entry: dict, rule: str | None) -> bool:
    """Whether a journal line's student was late and graded under another late penalty than
    ``rule`` (a line from before the rule was kept, or either rule unknown: not rerated)."""
    then = entry.get("penalty")
    return bool(rule and then and then != rule and float(entry.get("seconds_late") or 0) > 0)


def _iso(moment) -> str | None:
    return moment.isoformat(sep=" ") if moment is not None else None


def when(due: str | None) -> str:
    """A journal's due date as the batch says it: to the minute, UTC (nbgrader keeps UTC)."""
    return f"{due[:16]} UTC" if due else "no due date"


def _some(names: list[str], shown: int = 5) -> str:
    more = len(names) - shown
    return "; ".join(names[:shown]) + (f"; and {more} more" if more > 0 else "")


def _submissions(coursedir: CourseDirectory, lesson: str) -> list[tuple[str, Path]]:
    """``(student folder name, submission folder)`` for every ``submitted/*/LESSON``."""
    return student_folders(coursedir, coursedir.submitted_directory, lesson)


def student_folders(coursedir: CourseDirectory, step: str, lesson: str) -> list[tuple[str, Path]]:
    """``(student folder name, folder)`` for every ``STEP/*/LESSON`` of the course's layout
    (``step``: ``submitted``, ``autograded``, ...), in the order of the names' bytes."""
    marker = "\x00student\x00"
    root, rest = coursedir.format_path(step, marker, lesson).split(marker)
    if not os.path.isdir(root):
        return []
    found = []
    for entry in sorted(os.scandir(root), key=lambda e: os.fsencode(e.name)):
        folder = Path(entry.path + rest)
        if os.path.lexists(folder):
            found.append((entry.name, folder))
    return found


def _prefetch(
    app: AutogradeApp, lesson: str, notebooks: list[str], item: _Todo, pool: Pool, limits: Limits
) -> None:
    """Sanitize the student's notebooks of the lesson (``notebooks``) as nbgrader will, and send
    them to the pool."""
    files = {}
    with contextlib.suppress(Exception):
        ignore = list(app.coursedir.ignore)  # the files nbgrader will copy, and only those
        files = submission.files_beside(item.folder, ignore=ignore)
        source = Path(app.coursedir.format_path(app.coursedir.source_directory, ".", lesson))
        files.update(submission.files_beside(source, ignore=ignore))
    for path in [item.folder / f"{name}.ipynb" for name in sorted(notebooks)]:
        try:
            nb = _sanitized(app, lesson, item.name, path)
        except Exception:  # noqa: BLE001 — nbgrader will report this student's problem itself,
            # unless nbformat would not take the notebook
            item.refused += notebook_format.file_problems(path)
            continue
        future = pool.send(limits, json.dumps(nb), files, item.name)
        if future is not None:  # (None: the pool is lost, and the batch stops before this one)
            item.jobs[path.stem] = (nbgrader_plugin.fingerprint(nb, files), future)


def own_seconds(results) -> float:
    """The seconds a student's notebooks took to grade, each as its engine measured it (cells
    and checks, not the wait for a warm template): not the time their results waited for the
    students before them, whom nbgrader's loop writes first."""
    return round(sum(float(r.get("seconds") or 0.0) for r in results), 3)


def _sanitized(app: AutogradeApp, lesson: str, student: str, path: Path):
    """The notebook at ``path`` as nbgrader's loop will sanitize it, kept for that loop."""
    nb = nbformat.reads(
        submission.read(path, submission.MAX_NOTEBOOK_BYTES).decode("utf-8"), as_version=4
    )
    info = {"student": student, "assignment": lesson, "notebook": path.stem}
    resources = {"nbgrader": {**info, "db_url": app.coursedir.db_url},
                 "metadata": {"path": str(path.parent)}}  # fmt: skip
    return nbgrader_plugin.sanitize_ahead(app.config, nb, resources)


def _grade_student(app, course: Path, lesson: str, item: _Todo, options: BatchOptions):
    """nbgrader's autograde for one student (the pool's results already on their way)."""
    from . import feedback

    shown = submission.shown(item.name)
    coursedir = app.coursedir
    converter = Autograde(coursedir=coursedir, parent=app)
    converter.force = True
    results: dict[str, dict] = {}
    try:
        if converter.create_student:
            ensure_student(coursedir.db_url, coursedir.course_id, item.name)
        with nbgrader_plugin.supply(kept=results):
            error = run_converter(converter, item.name)
    except Exception as failure:  # noqa: BLE001 — one student's failure never stops the batch
        error = first_error("", failure)
    seconds = own_seconds(results.values())
    if error:
        return StudentResult(shown, "error", error=error, seconds=seconds)
    result = StudentResult(shown, "graded", seconds=seconds)
    result.crowded = any(r.get("crowded") for r in results.values())
    for name, value in _score(coursedir, lesson, item.name).items():
        setattr(result, name, value)
    result.problems = _problems(results.values())
    if options.feedback:
        feedback.write_for(coursedir, lesson, item.name, results)
    return result


def ensure_student(db_url: str, course_id: str, student: str, tries: int = 3) -> None:
    """Make sure the gradebook has a row for ``student`` before nbgrader's loop looks for it.

    nbgrader looks the student up and inserts it when missing. Two graders writing one gradebook
    at once (two lessons graded together) can both miss and both insert; the second insert then
    fails, and nbgrader fails that student. Here a failed insert is followed by another look,
    which finds the row the other grader made.
    """
    from nbgrader.api import Gradebook, InvalidEntry

    for attempt in range(tries):
        with Gradebook(db_url, course_id) as gb:
            try:
                gb.update_or_create_student(student)
                return
            except InvalidEntry:
                if attempt == tries - 1:
                    raise


def run_converter(converter, student: str) -> str:
    """``converter.start()`` (an nbgrader converter) for one student folder, named as it is, not
    as a pattern: "" if it succeeded, else its first error, from nbgrader's log or the
    exception. The course directory is set to that student for this run only."""
    coursedir = converter.coursedir
    coursedir.student_id = student
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setLevel(logging.ERROR)
    converter.log.addHandler(handler)
    try:
        converter.start()
    except Exception as error:  # noqa: BLE001 — one student's failure never stops the others
        return first_error(log.getvalue(), error)
    finally:
        converter.log.removeHandler(handler)
        coursedir.student_id = "*"
    return ""


def first_error(log: str, error: BaseException) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Refused)\b", line.strip()):
            return re.sub(r"\s+", " ", line.strip())[:300]
    text = f"{type(error).__name__}: {error}"
    return re.sub(r"\s+", " ", text)[:300]


def _autograded_exists(coursedir, lesson: str, student: str) -> bool:
    dest = Path(coursedir.format_path(coursedir.autograded_directory, student, lesson))
    return dest.is_dir() and any(dest.glob("*.ipynb"))


GRADE = ("score", "max_score", "raw_score", "late_submission_penalty", "seconds_late")


def _grade_of(entry: dict) -> dict:
    """The fields of :data:`GRADE` in ``entry`` (a journal line, or a result's ``as_dict``); a
    line from before lateness was kept has its score as the raw score, and none late."""
    found = {name: entry[name] for name in GRADE if entry.get(name) is not None}
    return {"raw_score": found.get("score"), **found}


def _score(coursedir, lesson: str, student: str) -> dict:
    """The student's grade of ``lesson`` from the gradebook (the fields of :data:`GRADE`), as
    ``nbgrader export`` reports it: the score is the raw score less the late penalty, at least 0."""
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        try:
            found = gb.find_submission(lesson, student)
        except Exception:  # noqa: BLE001
            return {}
        raw, penalty = float(found.score), float(found.late_submission_penalty or 0.0)
        return {
            "score": max(0.0, raw - penalty),
            "max_score": float(found.max_score),
            "raw_score": raw,
            "late_submission_penalty": penalty,
            "seconds_late": float(found.total_seconds_late or 0.0),
        }


def _problems(results) -> list[str]:
    out = []
    for result in results:
        out += [v["name"] for v in result.get("verdicts", []) if not v["passed"]]
        out += [note[:120] for note in result.get("notes", [])]
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# reports


def summary_table(results: list[StudentResult]) -> str:
    late = any(r.seconds_late > 0 for r in results)  # a column of its own only then
    rows = [("student", "score", "status", *(["late"] if late else []), "notes")]
    for r in results:
        score = "" if r.score is None else f"{r.score:g}/{r.max_score:g}"
        notes = r.error or ", ".join(r.problems)
        rows.append((r.student, score, r.status, *([lateness(r)] if late else []), notes[:70]))
    columns = len(rows[0]) - 1  # padded; the notes are last
    widths = [max(len(row[i]) for row in rows) for i in range(columns)]
    lines = []
    for n, row in enumerate(rows):
        padded = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True))
        lines.append(padded + "  " + row[-1])
        if n == 0:
            lines.append("-" * (sum(widths) + 2 * columns + 20))
    graded = [r for r in results if r.status in ("graded", "skipped")]
    errors = [r for r in results if r.status == "error"]
    refused = [r for r in results if r.status == "refused"]
    lines.append(
        f"\n{len(graded)} graded ({sum(r.status == 'skipped' for r in results)} "
        f"already done), {len(refused)} refused, {len(errors)} with errors"
    )
    again = sum(r.regraded for r in results)
    if again:
        lines.append(f"{again} graded again alone: {CROWDED}")
    return "\n".join(lines)


def lateness(r) -> str:
    """How late a submission was, and nbgrader's penalty for it: ``1 d 3 h (-2)`` (``r``: a
    :class:`StudentResult`, or anything with its ``seconds_late`` and ``late_submission_penalty``,
    such as a row of ``attn-grade report``)."""
    if r.seconds_late <= 0:
        return ""
    minutes = round(r.seconds_late / 60)
    units = [(minutes // 1440, "d"), (minutes // 60 % 24, "h"), (minutes % 60, "min")]
    while units and not units[0][0]:
        units.pop(0)  # the two largest units from the first that is not 0
    shown = " ".join(f"{n} {unit}" for n, unit in units[:2] if n) or "<1 min"
    return shown + (f" (-{r.late_submission_penalty:g})" if r.late_submission_penalty else "")


def write_csv(results: list[StudentResult], path: Path) -> None:
    """The results, a row a student; a spreadsheet reads no id or error as a formula."""
    header = ["student", "status", *GRADE, "seconds", "problems", "error", "regraded"]
    spreadsheet.write(path, header, (
        [r.student, r.status, *(getattr(r, name) for name in GRADE), r.seconds,
         "; ".join(r.problems), r.error, r.regraded] for r in results))  # fmt: skip
