"""``attn-grade feedback``: nbgrader's HTML feedback for a class, several students at a time.

``nbgrader generate_feedback LESSON`` writes ``feedback/STUDENT/LESSON/*.html`` one student after
another, in one process: about a second of CPU per notebook (nbconvert renders the page, then
parses it again to add alternative texts and tab stops), on one core. For a class of hundreds it
takes about as long as ``attn-grade batch`` took to grade it on two cores.

This command runs the same converter — nbgrader's ``GenerateFeedback``, with the course's
configuration, through its public API as the batch runs ``Autograde`` — for ``workers`` students
at a time, each worker a process of its own. So the pages are nbgrader's, byte for byte, nbgrader
copies the files beside the autograded notebooks (``attn-feedback.md``) as it always does, and
nbgrader decides whom to write: a student whose feedback is already there and not older than the
autograded notebooks is skipped, unless ``force``. A worker process killed from outside is
started again, and the pages it held written by the new one (:mod:`autograder.respawn`).

No learner code runs here: a page is rendered from an autograded notebook and the gradebook, as
``nbgrader generate_feedback`` renders it. A student folder whose name nbgrader would read as a
pattern is refused, as the batch refuses it (:func:`autograder.submission.name_problems`). The
workers only read the gradebook, and each writes its own students' folders.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import multiprocessing as mp
import multiprocessing.util
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import submission
from .names import chosen_students, nothing_matches
from .respawn import Processes

_WORKER: dict = {}


@dataclass
class FeedbackResult:
    student: str
    status: str  # written | skipped | refused | error
    seconds: float = 0.0
    error: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _app(lesson: str, log_level: str):
    """nbgrader's feedback app with the configuration of the course in the current folder."""
    from nbgrader.apps.generatefeedbackapp import GenerateFeedbackApp

    GenerateFeedbackApp.clear_instance()
    app = GenerateFeedbackApp.instance()
    app.initialize([lesson, f"--log-level={log_level}"])
    app.coursedir.assignment_id = lesson
    return app


def _init(course: str, lesson: str, log_level: str) -> None:
    """A worker: nbgrader's feedback app with the course's configuration, made once."""
    from .cli import skip_iri_grammars
    from .sandbox.confine import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, 9)  # the workers die with the command
    skip_iri_grammars()
    from .gradebook_engine import one_engine

    os.chdir(course)
    stack = contextlib.ExitStack()
    stack.enter_context(one_engine())  # one engine per gradebook for the worker's life
    mp.util.Finalize(None, stack.close, exitpriority=10)  # closed as the worker exits
    _WORKER.update(app=_app(lesson, log_level))


def _write(student: str, force: bool) -> FeedbackResult:
    """nbgrader's feedback for one student, in this worker."""
    from nbgrader.converters import GenerateFeedback

    from .batch import run_converter

    class Converter(GenerateFeedback):
        wrote = False

        def init_destination(self, assignment_id: str, student_id: str) -> bool:
            self.wrote = super().init_destination(assignment_id, student_id)
            return self.wrote

    started = time.monotonic()
    converter = Converter(coursedir=_WORKER["app"].coursedir, parent=_WORKER["app"])
    converter.force = force
    error = run_converter(converter, student)  # no pattern: name_problems refused those
    status = "error" if error else "written" if converter.wrote else "skipped"
    seconds = round(time.monotonic() - started, 3)
    return FeedbackResult(submission.shown(student), status, seconds, error)


def write_feedback(
    course: Path,
    lesson: str,
    workers: int = 2,
    force: bool = False,
    progress: bool = True,
    log_level: str = "ERROR",
    student: str = "*",
) -> list[FeedbackResult]:
    """nbgrader's HTML feedback for every ``autograded/*/LESSON`` of ``course`` (or those of the
    students ``student`` matches: an id, or a glob as nbgrader's ``--student``), ``workers``
    students at a time (see the module doc); one result per student folder, sorted by name."""
    from nbgrader.apps.generatefeedbackapp import GenerateFeedbackApp
    from tqdm import tqdm

    from .batch import student_folders

    course = Path(course).resolve()
    here = os.getcwd()
    os.chdir(course)
    try:  # the student folders, where the course's configuration puts them
        coursedir = _app(lesson, log_level).coursedir
        step = coursedir.autograded_directory
        students = [name for name, _ in student_folders(coursedir, step, lesson)]
        if not students:
            raise nothing_matches(coursedir, step, lesson, "no submission of it is graded yet")
        if student != "*":
            where = coursedir.format_path(step, "*", lesson)
            students = chosen_students(students, student, where)
    finally:
        GenerateFeedbackApp.clear_instance()
        os.chdir(here)
    results, todo = [], []
    for name in students:
        found = submission.name_problems(name)
        if found:
            results.append(FeedbackResult(submission.printable(name), "refused", error=found[0]))
        else:
            todo.append(name)
    if todo:
        workers = max(1, min(workers, len(todo)))

        def start(again: bool) -> cf.ProcessPoolExecutor:
            return cf.ProcessPoolExecutor(
                max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init,
                initargs=(str(course), lesson, log_level),
            )  # fmt: skip

        processes = Processes(start, _write, RESTARTED)
        bar = tqdm(total=len(todo), desc=f"feedback {lesson}", unit="student",
                   disable=not progress, leave=False)  # fmt: skip
        try:
            sent = [(name, processes.submit(name, force)) for name in todo]
            for name, page in sent:
                try:
                    results.append(processes.result(page))
                except Exception as error:  # noqa: BLE001 — the workers died too often, say
                    shown = submission.shown(name)
                    results.append(FeedbackResult(shown, "error", error=f"{error!r}"[:300]))
                bar.update(1)
        finally:
            bar.close()
            processes.close()
    return sorted(results, key=lambda r: os.fsencode(r.student))


RESTARTED = (
    "attn-grade feedback: a worker process died (killed from outside: out of memory?); the "
    "workers were started again, and the {n} page(s) they held sent again (restart {restart} of "
    "the {of} a run gets)"
)


def summary(results: list[FeedbackResult]) -> str:
    """One line per student not written, then the counts."""
    lines = [f"{r.student}: {r.status}{': ' + r.error if r.error else ''}"
             for r in results if r.status in ("error", "refused")]  # fmt: skip
    count = {s: sum(r.status == s for r in results) for s in ("written", "skipped", "refused")}
    errors = sum(r.status == "error" for r in results)
    lines.append(
        f"feedback written for {count['written']} students ({count['skipped']} already up to "
        f"date), {count['refused']} refused, {errors} with errors"
    )
    return "\n".join(lines)
