"""``attn-grade batch``: nbgrader's autograde, with warm sandboxed workers instead of kernels.

The grading *is* nbgrader's: :class:`FastAutograde` subclasses nbgrader's ``Autograde`` converter
and keeps every step of ``nbgrader autograde`` — the student and submission rows, the copy of the
source files, the sanitizing preprocessors (``ClearOutput``, ``DeduplicateIds``,
``OverwriteKernelspec``, ``OverwriteCells`` restoring locked and test cells from the gradebook,
``CheckCellMetadata``), then ``LimitOutput``, ``SaveAutoGrades``, ``AssignLatePenalties``, the
writing of ``autograded/`` and its permissions — except ``Execute``. In its place
:class:`FastExecute` takes the cells' outputs from a worker pool, where each submission runs in
a sandbox forked from a warm worker (:mod:`autograder.grading`), so ``nbgrader export``,
``generate_feedback`` and formgrader read what they always read.

Two things differ from ``nbgrader autograde`` on purpose (docs/grading.md): a deleted test cell is
put back (nbgrader's own ``OverwriteCells.add_missing_cells``), and hidden checks are also run
outside the notebook, so a submission that fools the checks inside it gets no points for that.

Submissions are prepared and sent to the pool ahead of nbgrader's loop, which then finds each
result ready. A journal (``COURSE/.attn-grade/LESSON.jsonl``) records each student once graded;
a batch killed half-way and rerun grades only the students it had not finished.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import re
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.apps.autogradeapp import AutogradeApp
from nbgrader.converters.autograde import Autograde
from nbgrader.converters.base import BaseConverter
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import remove, setenv

from . import isolation
from .executor import picture_cells
from .worker import Pool, sandbox_options

JOURNAL_DIR = ".attn-grade"


# ---------------------------------------------------------------------------------------------
# nbgrader, with execution replaced


def code_sources(nb) -> dict[int, str]:
    out = {}
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            out[i] = "".join(src) if isinstance(src, list) else str(src)
    return out


class Engine:
    """Hands :class:`FastExecute` the results prepared by the pool."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self.jobs: dict[tuple[str, str], tuple[dict[int, str], cf.Future]] = {}
        self.results: dict[tuple[str, str], dict] = {}

    def prefetch(self, student: str, notebook: str, nb_json: str, files: dict) -> None:
        nb = json.loads(nb_json)
        self.jobs[(student, notebook)] = (code_sources(nb), self.pool.submit(nb_json, files))

    def result_for(self, student: str, notebook: str, nb: NotebookNode, files: dict) -> dict:
        key = (student, notebook)
        job = self.jobs.pop(key, None)
        if job is None or job[0] != code_sources(nb):
            # Not what was prepared (or nothing was): grade exactly this notebook, now.
            job = (None, self.pool.submit(nbformat.writes(nb), files))
        result = job[1].result()
        self.results[key] = result
        return result


class FastExecute(NbGraderPreprocessor):
    """nbgrader's ``Execute`` step, with the outputs coming from an attn-grade worker."""

    engine: Engine | None = None
    files: dict = {}

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict):
        info = resources["nbgrader"]
        result = self.engine.result_for(info["student"], info["notebook"], nb, self.files)
        apply_result(nb, result)
        return nb, resources


def apply_result(nb: NotebookNode, result: dict) -> None:
    """Put a worker's outputs into the notebook's code cells."""
    cells = result.get("cells", {})
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        rec = cells.get(str(i))
        if rec is None:
            cell.outputs, cell.execution_count = [], None
            continue
        cell.outputs = [nbformat.from_dict(o) for o in rec["outputs"]]
        cell.execution_count = rec.get("execution_count")


class FastAutograde(Autograde):
    """nbgrader's Autograde converter with :class:`FastExecute` in place of ``Execute``."""

    def _init_preprocessors(self) -> None:
        self.exporter._preprocessors = []
        preprocessors = (
            self.sanitize_preprocessors if self._sanitizing else self.autograde_preprocessors
        )
        for pp in preprocessors:
            if isinstance(pp, type) and issubclass(pp, Execute):
                pp = FastExecute
            self.exporter.register_preprocessor(pp)


# ---------------------------------------------------------------------------------------------
# the journal


class Journal:
    """One JSON line per finished student; fsync'd, so a killed batch knows who is done."""

    def __init__(self, course: Path, lesson: str):
        folder = course / JOURNAL_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        self.path = folder / f"{lesson}.jsonl"
        self.entries: dict[str, dict] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill: that student is not done
                if isinstance(entry, dict) and "student" in entry:
                    self.entries[entry["student"]] = entry

    def done(self, student: str, stamp: str) -> bool:
        entry = self.entries.get(student)
        return bool(entry and entry.get("status") == "graded" and entry.get("stamp") == stamp)

    def mark(self, entry: dict) -> None:
        self.entries[entry["student"]] = entry
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def forget(self) -> None:
        self.entries = {}
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def stamp_of(folder: Path) -> str:
    """A fingerprint of a submission folder's files (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# one batch


@dataclass
class StudentResult:
    student: str
    status: str  # graded | skipped | error
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    error: str = ""
    built: list = field(default_factory=list, repr=False)
    files: dict = field(default_factory=dict, repr=False)
    notebooks: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {
            "student": self.student,
            "status": self.status,
            "score": self.score,
            "max_score": self.max_score,
            "seconds": self.seconds,
            "problems": self.problems,
            "error": self.error,
        }


@dataclass
class BatchOptions:
    workers: int = 2
    limits: isolation.Limits = field(default_factory=isolation.Limits)
    force: bool = False
    progress: bool = True
    feedback: bool = True
    sandbox_user: bool = True  # run learner code under its own uid when we are root
    log_level: str = "WARN"


def run_batch(
    course: Path, lesson: str, options: BatchOptions, pool: Pool | None = None
) -> list[StudentResult]:
    """Grade every ``submitted/*/LESSON`` of ``course``; see the module doc.

    ``pool`` may be started by the caller beforehand (its workers warm up meanwhile).
    """
    course = Path(course).resolve()
    here = os.getcwd()
    own = pool is None
    if own:
        pictures = picture_cells(course, lesson)
        pool = Pool(
            max(1, options.workers),
            sandbox_options(options.limits, options.sandbox_user, pictures),
        )
    os.chdir(course)
    try:
        return _run_batch(course, lesson, options, pool)
    finally:
        os.chdir(here)
        if own:
            pool.close()


def _make_app(lesson: str, log_level: str) -> AutogradeApp:
    AutogradeApp.clear_instance()
    app = AutogradeApp.instance()
    app.initialize([lesson, f"--log-level={log_level}"])
    app.coursedir.assignment_id = lesson
    app.config.OverwriteCells.add_missing_cells = True
    return app


def _run_batch(course: Path, lesson: str, options: BatchOptions, pool: Pool) -> list[StudentResult]:
    from tqdm import tqdm

    from . import feedback as feedback_mod

    app = _make_app(lesson, options.log_level)
    coursedir = app.coursedir
    converter = FastAutograde(coursedir=coursedir, parent=app)
    converter.force = True
    journal = Journal(course, lesson)
    if options.force:
        journal.forget()
    submissions = sorted(
        Path(coursedir.format_path(coursedir.submitted_directory, "*", lesson)).parent.parent.glob(
            f"*/{lesson}"
        )
    )
    todo, results = [], []
    for folder in submissions:
        if not folder.is_dir():
            continue
        student = folder.parent.name
        stamp = stamp_of(folder)
        if journal.done(student, stamp) and _autograded_exists(coursedir, lesson, student):
            entry = journal.entries[student]
            results.append(
                StudentResult(student, "skipped", entry.get("score"), entry.get("max_score"))
            )
            continue
        todo.append((student, folder, stamp))
    if not todo:
        return results

    engine = Engine(pool)
    FastExecute.engine = engine
    converter.init_notebooks()
    converter.writer = _writer(converter)
    converter.exporter = converter.exporter_class(parent=converter, config=converter.config)
    bar = tqdm(
        total=len(todo),
        desc=f"grading {lesson}",
        unit="student",
        disable=not options.progress,
        leave=False,
    )
    # nbgrader's steps for a student, split in two: everything up to the sanitized notebook
    # (which goes to the pool at once), then, a few students later, the rest. A small window
    # keeps the workers busy while this process writes the gradebook.
    window = 2 * max(1, options.workers) + 1
    pending: deque = deque()

    def finish(item) -> None:
        student, folder, stamp, started, result = item
        if result.status == "prepared":
            result = _finish_student(converter, lesson, student, result)
        result.seconds = round(time.monotonic() - started, 3)
        if result.status == "graded":
            result.score, result.max_score = _score(coursedir, lesson, student)
            result.problems = _problems(engine, student)
            if options.feedback:
                with contextlib.suppress(Exception):
                    feedback_mod.write_for(course, coursedir, lesson, student, engine.results)
        journal.mark(
            {
                "student": student,
                "status": result.status,
                "stamp": stamp,
                "score": result.score,
                "max_score": result.max_score,
                "error": result.error,
                "at": time.time(),
            }
        )
        results.append(result)
        bar.update(1)

    try:
        for student, folder, stamp in todo:
            started = time.monotonic()
            result = _prepare_student(converter, engine, lesson, student, folder)
            pending.append((student, folder, stamp, started, result))
            while pending and (len(pending) > window or _ready(engine, pending[0][0])):
                finish(pending.popleft())
        while pending:
            finish(pending.popleft())
    finally:
        bar.close()
        FastExecute.engine = None
    return sorted(results, key=lambda r: r.student)


def _ready(engine: Engine, student: str) -> bool:
    jobs = [job for (who, _), job in engine.jobs.items() if who == student]
    return all(job[1].done() for job in jobs)


def _writer(converter):
    from nbconvert.writers import FilesWriter

    return FilesWriter(parent=converter, config=converter.config)


@contextlib.contextmanager
def _errors_to(result_log: io.StringIO, converter):
    handler = logging.StreamHandler(result_log)
    handler.setLevel(logging.ERROR)
    converter.log.addHandler(handler)
    try:
        yield
    finally:
        converter.log.removeHandler(handler)
        converter._sanitizing = True


def _failed(converter, lesson: str, student: str, error: BaseException, log: io.StringIO):
    """nbgrader's ``_handle_failure``: remove the student's autograded notebooks."""
    dest = Path(converter._format_dest(lesson, student))
    for notebook in converter.notebooks:
        path = dest / (Path(notebook).stem + ".ipynb")
        if path.exists():
            remove(str(path))
    converter.log.debug(traceback.format_exc())
    message = _first_line(error) or (log.getvalue().strip().splitlines() or ["error"])[-1]
    return StudentResult(student, "error", error=message)


def _prepare_student(converter: FastAutograde, engine: Engine, lesson, student, folder: Path):
    """nbgrader's first steps for one submission (``BaseConverter.convert_notebooks`` and the
    sanitizing half of ``Autograde.convert_single_notebook``); sends the result to the pool."""
    converter.notebooks = sorted(str(p) for p in folder.glob("*.ipynb"))
    log = io.StringIO()
    with _errors_to(log, converter):
        try:
            if not converter.init_destination(lesson, student):
                return StudentResult(student, "skipped")
            converter.run_pre_convert_hook()
            converter.init_assignment(lesson, student)
            dest = Path(converter._format_dest(lesson, student))
            built = []
            for notebook in converter.notebooks:
                converter.log.info("Sanitizing %s", notebook)
                converter._sanitizing = True
                converter._init_preprocessors()
                BaseConverter.convert_single_notebook(converter, notebook)
                built.append(str(dest / os.path.basename(notebook)))
            files = _files_in(dest)
            for path in built:
                engine.prefetch(student, Path(path).stem, Path(path).read_text("utf-8"), files)
            result = StudentResult(student, "prepared")
            result.built = built
            result.files = files
            result.notebooks = list(converter.notebooks)
            return result
        except Exception as error:  # noqa: BLE001 — one student's failure never stops the batch
            return _failed(converter, lesson, student, error, log)


def _finish_student(converter: FastAutograde, lesson, student, prepared: StudentResult):
    """The rest: the autograding half of ``Autograde.convert_single_notebook`` (execution
    replaced by :class:`FastExecute`), permissions, the post-convert hook."""
    converter.notebooks = prepared.notebooks
    log = io.StringIO()
    with _errors_to(log, converter):
        try:
            FastExecute.files = prepared.files
            for path in prepared.built:
                converter.log.info("Autograding %s", path)
                converter._sanitizing = False
                converter._init_preprocessors()
                with setenv(NBGRADER_EXECUTION="autograde"):
                    BaseConverter.convert_single_notebook(converter, path)
            converter.set_permissions(lesson, student)
            converter.run_post_convert_hook()
            return StudentResult(student, "graded")
        except Exception as error:  # noqa: BLE001
            return _failed(converter, lesson, student, error, log)


def _files_in(dest: Path) -> dict[str, bytes]:
    """The files nbgrader leaves beside the notebook when it executes it (its working dir)."""
    files, total = {}, 0
    for path in sorted(p for p in dest.rglob("*") if p.is_file() and p.suffix != ".ipynb"):
        size = path.stat().st_size
        if total + size > 64 * 2**20:
            break
        total += size
        files[str(path.relative_to(dest))] = path.read_bytes()
    return files


def _first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return re.sub(r"\s+", " ", text)[:300]


def _autograded_exists(coursedir, lesson: str, student: str) -> bool:
    dest = Path(coursedir.format_path(coursedir.autograded_directory, student, lesson))
    return dest.is_dir() and any(dest.glob("*.ipynb"))


def _score(coursedir, lesson: str, student: str) -> tuple[float | None, float | None]:
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        try:
            submission = gb.find_submission(lesson, student)
        except Exception:  # noqa: BLE001
            return None, None
        return float(submission.score), float(submission.max_score)


def _problems(engine: Engine, student: str) -> list[str]:
    out = []
    for (who, _notebook), result in engine.results.items():
        if who != student:
            continue
        for v in result.get("verdicts", []):
            if not v["passed"]:
                out.append(v["name"])
        for note in result.get("notes", []):
            out.append(note[:120])
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# reports


def summary_table(results: list[StudentResult]) -> str:
    rows = [("student", "score", "status", "notes")]
    for r in results:
        score = "" if r.score is None else f"{r.score:g}/{r.max_score:g}"
        notes = r.error or ", ".join(r.problems)
        rows.append((r.student, score, r.status, notes[:70]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        )
        if n == 0:
            lines.append("-" * (sum(widths) + 6 + 20))
    graded = [r for r in results if r.status in ("graded", "skipped")]
    errors = [r for r in results if r.status == "error"]
    lines.append(
        f"\n{len(graded)} graded ({sum(r.status == 'skipped' for r in results)} "
        f"already done), {len(errors)} with errors"
    )
    return "\n".join(lines)


def write_csv(results: list[StudentResult], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "status", "score", "max_score", "seconds", "problems", "error"])
        for r in results:
            writer.writerow(
                [
                    r.student,
                    r.status,
                    r.score,
                    r.max_score,
                    r.seconds,
                    "; ".join(r.problems),
                    r.error,
                ]
            )
