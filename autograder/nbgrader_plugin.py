"""The trusted grading engine inside nbgrader, through nbgrader's own configuration.

The course's ``nbgrader_config.py`` sets nbgrader's documented converter traits
``Autograde.sanitize_preprocessors`` and ``Autograde.autograde_preprocessors`` to :data:`SANITIZE`
and :data:`AUTOGRADE` (:func:`trusted_pipeline`): nbgrader's lists with the two changes below.
The sanitizing steps (:data:`SANITIZE_STEPS`) run as one preprocessor, :class:`Sanitize`. The
notebook is validated where something from outside enters it (as submitted, and with the
sandbox's outputs, before they are scored) and after the last step, not after every step.

* :class:`CheckSubmission` comes first: it refuses a submission holding anything but regular files
  (:mod:`autograder.submission`), and replaces lone surrogates in the notebook's text, which could
  not be written back as UTF-8. nbgrader copies a submission's other files before any
  preprocessor runs, so :func:`guard_copy`, set as the documented ``Autograde.pre_convert_hook``,
  first makes that copy skip everything of a submission that will be refused: nothing is read
  through a link (a link to ``/dev/zero`` would fill the disk; one to the gradebook would copy it).
* :class:`TrustedExecute` replaces ``Execute``: the notebook runs in attn-grade's sandbox and
  every graded cell's outputs are written from verdicts reached outside it
  (:mod:`autograder.engine`), so ``SaveAutoGrades`` — nbgrader's scoring — scores what the grader
  decided and nothing the notebook displayed.

:class:`Deduplicate` and :class:`RestoreCells` take the place of nbgrader's ``DeduplicateIds``
and ``OverwriteCells``: a notebook whose course cells a learner copied, retyped or deleted is
graded (nbgrader's fail such a student), every course cell's tag is rebuilt from the gradebook,
and the learner is told what was set back (:mod:`autograder.cells`). After them,
:class:`ShowProse` makes every Markdown and raw cell that is not one of the lesson's own show as
text in formgrader and the feedback page (:mod:`autograder.prose`).

And :class:`CheckCellMetadata` is nbgrader's check of the cells' metadata against the same
schema, with the schema's validator built once: nbgrader's builds it and checks the schema itself
again for every cell of every notebook, twice per submission. :class:`SaveAutoGrades` is
nbgrader's, reading a notebook's grades and comments in two queries instead of one per cell,
and writing its scores in one transaction instead of one per cell.

So plain ``nbgrader autograde`` and ``attn-grade batch`` grade with the same engine and give the
same scores; ``attn-grade batch`` only adds parallel workers (:func:`supply` hands their results
to :class:`TrustedExecute`), and sanitizes each notebook once, ahead of nbgrader's loop, for them
and for that loop (:func:`sanitizing_ahead`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import jsonschema
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import (
    AssignLatePenalties,
    ClearOutput,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    OverwriteCells,
    OverwriteKernelspec,
)
from nbgrader.preprocessors import CheckCellMetadata as NbgraderCheckCellMetadata
from nbgrader.preprocessors import SaveAutoGrades as NbgraderSaveAutoGrades
from traitlets import Float, Integer, Unicode

from . import cells, history, names, notebook_format, prose, submission
from .limits import Limits
from .protocol import scrub
from .template import shared_pair


class _SchemaOnce(BaseMetadataValidator):
    """The base of nbgrader's metadata validator, with its schema's validator built once."""

    def __init__(self) -> None:
        super().__init__()
        cls = jsonschema.validators.validator_for(self.schema)
        cls.check_schema(self.schema)
        self._check = cls(self.schema)

    def validate_cell(self, cell) -> None:
        if "nbgrader" not in cell.metadata:
            return
        if cell.metadata["nbgrader"].get("schema_version", 0) != self.schema_version:
            super().validate_cell(cell)  # nbgrader's own errors, worded its way
        meta = cell.metadata["nbgrader"]
        error = jsonschema.exceptions.best_match(self._check.iter_errors(meta))
        if error is not None:  # what jsonschema.validate raises
            raise error


class _Validator(MetadataValidator, _SchemaOnce):
    """nbgrader's validator (grade ids, points, cell types) on :class:`_SchemaOnce`."""


@functools.cache
def _validator() -> _Validator:
    return _Validator()


class CheckCellMetadata(NbgraderCheckCellMetadata):
    """nbgrader's ``CheckCellMetadata``, with the schema's validator built once (module doc)."""

    def preprocess(self, nb, resources):
        try:
            _validator().validate_nb(nb)
        except jsonschema.ValidationError:
            return super().preprocess(nb, resources)  # nbgrader logs and raises, as always
        return nb, resources


class CheckSubmission(NbGraderPreprocessor):
    """Refuse links and special files in a submission; make the notebook's text writable.

    Every string loses its lone surrogates, which could not be written back as UTF-8.
    """

    def preprocess(self, nb, resources):
        self.check_folder(resources)
        _scrub_notebook(nb)
        return nb, resources

    def check_folder(self, resources) -> None:
        """Raise :class:`~autograder.submission.Refused` if the submission's folder holds
        anything but regular files (and remove what nbgrader copied of it)."""
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        folder = Path(
            coursedir.format_path(
                coursedir.submitted_directory, info["student"], info["assignment"]
            )
        )
        found = submission.problems(folder, folder.parent, [info["notebook"]])
        if found:
            dest = Path(
                coursedir.format_path(
                    coursedir.autograded_directory, info["student"], info["assignment"]
                )
            )
            shutil.rmtree(dest, ignore_errors=True)  # nbgrader copied it before any hook ran
            refuse(resources, found)


_BASE_IGNORE: dict[int, list[str]] = {}


def guard_copy(assignment: str, student: str, notebooks: list[str]) -> None:
    """``Autograde.pre_convert_hook``: nbgrader's copy step skips a submission that is refused.

    nbgrader calls this before it copies the files of one submission (``notebooks`` are that
    submission's notebooks; ``student`` may be nbgrader's ``*``). If the folder holds anything
    :class:`CheckSubmission` will refuse (a link, a special file, one of the lesson's notebooks
    beyond the bounds of :func:`submission.notebook_problems`) — or cannot be told — the
    course directory's ``ignore`` globs become ``*`` for this submission, so nothing of it is
    copied; otherwise they are the course's own. It never raises (nbgrader would only log it),
    so it fails closed.
    """
    from nbgrader.apps.autogradeapp import AutogradeApp

    coursedir = AutogradeApp.instance().coursedir
    base = _BASE_IGNORE.setdefault(id(coursedir), list(coursedir.ignore))
    try:
        folders = {Path(path).parent for path in notebooks}
        folder = next(iter(folders))
        known = names.released_notebooks(coursedir, folder.name)  # nbgrader skips any other
        graded = [Path(path).stem for path in notebooks if Path(path).stem in known]
        safe = len(folders) == 1 and not submission.problems(folder, folder.parent, graded)
    except Exception:  # noqa: BLE001 — anything odd: copy nothing
        safe = False
    coursedir.ignore = base if safe else [*base, "*", ".*"]  # glob's * skips dotfiles


def _scrub_notebook(nb) -> None:
    for cell in nb.cells:
        if isinstance(cell.get("source"), str):
            cell.source = scrub(cell.source)
        scrub(cell.metadata)
    scrub(nb.metadata)


# ---------------------------------------------------------------------------------------------
# sanitizing, once


_ahead: dict[tuple, tuple[dict, dict]] | None = None
# what the sanitizing steps repaired in a notebook (cells.py), for TrustedExecute to tell the
# learner: (student, assignment, notebook, gradebook) → notes
_repairs: dict[tuple, list[str]] = {}


class Deduplicate(NbGraderPreprocessor):
    """nbgrader's ``DeduplicateIds`` done whole: of the cells sharing a grade id, the last keeps
    its tag; the others, and any tag without a grade id, lose it entirely
    (:func:`autograder.cells.deduplicate`; nbgrader's leaves them an empty tag, on which its
    ``OverwriteCells`` then fails)."""

    def preprocess(self, nb, resources):
        self.notes = cells.deduplicate(nb)
        for note in self.notes:
            self.log.warning("%s", note)
        return nb, resources


class _Course(NamedTuple):
    """A notebook's course cells as the gradebook has them (``RestoreCells._course``)."""

    order: list  # the source cells, in the notebook's order
    by_name: dict  # grade id → source cell
    grades: dict  # grade id → grade cell
    solutions: set  # grade ids of the answer cells
    tasks: dict  # grade id → task cell


class RestoreCells(OverwriteCells):
    """nbgrader's ``OverwriteCells``, with every course cell's tag rebuilt from the gradebook.

    nbgrader's checks the learner's tag field by field and fails the whole student on a field it
    cannot set back (``Inconsistent checksums`` for a test cell whose ``grade`` flag was turned
    off; ``No such grade cell`` for an answer cell given points). Here a tag whose grade id the
    gradebook knows is replaced by the gradebook's (role, points, checksum, type), the cell's type
    is set back to the gradebook's, and a locked cell's source too; a tag the gradebook does not
    know is removed (the cell runs as an ordinary one). A graded cell that is missing is put back
    after the nearest earlier course cell the notebook still has (nbgrader's fails when that
    is missing as well), or last, where every answer above it is defined. What it changed is
    noted for the learner.
    """

    def preprocess(self, nb, resources):
        self.notes: list[str] = []
        self._known = None
        return super().preprocess(nb, resources)

    def _course(self) -> _Course:
        """The notebook's course cells from the gradebook, read once."""
        if self._known is None:
            found = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
            order = list(found.source_cells)
            self._known = _Course(
                order=order,
                by_name={c.name: c for c in order},
                grades={c.name: c for c in found.grade_cells},
                solutions={c.name for c in found.solution_cells},
                tasks={c.name: c for c in found.task_cells},
            )
        return self._known

    def _tag(self, source, old: dict) -> dict:
        course = self._course()
        tag = {
            "cell_type": source.cell_type,
            "checksum": source.checksum,
            "grade": source.name in course.grades,
            "grade_id": source.name,
            "locked": bool(source.locked),
            "schema_version": 3,
            "solution": source.name in course.solutions,
            "task": source.name in course.tasks,
        }
        graded = course.grades.get(source.name) or course.tasks.get(source.name)
        if graded is not None:  # the learner's number where it is the same (2, not 2.0)
            points = old.get("points")
            same = type(points) in (int, float) and points == graded.max_score
            tag["points"] = points if same else graded.max_score
        return tag

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cells.grade_id_of(cell)
        if grade_id is None:
            return cell, resources
        source = self._course().by_name.get(grade_id)
        if source is None:
            self.log.warning("Cell '%s' does not exist in the database", grade_id[:60])
            del cell.metadata["nbgrader"]
            self.notes.append(f"a cell was labelled {grade_id[:60]} for nbgrader, which the lesson "
                              "has no cell of: it ran as an ordinary cell")  # fmt: skip
            return cell, resources
        old = dict(cell.metadata["nbgrader"])
        cell.metadata["nbgrader"] = self._tag(source, old)
        for key in ("grade", "solution", "locked", "task", "points"):
            if key in old and old.get(key) != cell.metadata["nbgrader"].get(key):
                self.report_change(grade_id, key, cell.metadata["nbgrader"].get(key), old[key])
        was = cell.cell_type
        note = cells.restore_type(cell, source.cell_type)
        if note:
            self.report_change(grade_id, "cell_type", source.cell_type, was)
            self.notes.append(note)
        if source.locked and cell.source != source.source:
            self.report_change(grade_id, "source", "the course's", "changed")
            cell.source = source.source
        return cell, resources

    def add_missing_grade_cells(self, nb, resources):
        course = self._course()
        order = course.order
        for index, source in enumerate(order):
            if source.name not in course.grades:
                continue
            present = {cells.grade_id_of(c): i for i, c in enumerate(nb.cells)}
            if source.name in present:
                continue
            self.log.warning("Missing grade cell %s encountered, adding to notebook", source.name)
            before = (present[c.name] for c in reversed(order[:index]) if c.name in present)
            cell = self.missing_cell_transform(
                source,
                course.grades[source.name].max_score,
                is_solution=source.name in course.solutions,
            )
            cells.give_id(nb, cell)
            nb.cells.insert(next(before, len(nb.cells) - 1) + 1, cell)
            self.notes.append(f"cell {source.name} was missing: the lesson's was put back and "
                              "graded")  # fmt: skip
        return nb, resources


class Sanitize(NbGraderPreprocessor):
    """nbgrader's sanitizing steps (:data:`SANITIZE_STEPS`) as one preprocessor.

    The steps run in order. The notebook is validated as submitted, after :class:`CheckSubmission`
    (one invalid then is refused with a line naming the place: :mod:`autograder.notebook_format`),
    and once more after the last step (by nbconvert, which validates what a preprocessor returns,
    or here with ``last``): the steps in between are the course's and nbgrader's own code, whose
    every change the last validation sees (:func:`trusted_pipeline`). Within
    :func:`sanitizing_ahead` (``attn-grade batch``), a notebook the batch sanitized ahead of
    nbgrader's loop, to send it to the workers (:func:`sanitize_ahead`), is not sanitized a
    second time: when nbgrader's loop reaches it, this returns what the steps made of exactly
    that notebook then, after checking the submission's folder again.
    """

    def preprocess(self, nb, resources):
        kept = _ahead.pop(_ahead_key(resources), None) if _ahead is not None else None
        if kept is not None and kept[0] == nb:
            CheckSubmission(parent=self).check_folder(resources)
            return kept[1], resources
        if _ahead is not None:
            who = (resources["nbgrader"]["notebook"], resources["nbgrader"]["student"])
            self.log.warning("No notebook sanitized ahead for %s of %s: sanitizing it here", *who)
        return self.steps(nb, resources, last=False)  # nbconvert validates what this returns

    def steps(self, nb, resources, last: bool = True):
        """Run the steps; validate after the first (the notebook as submitted) and, with
        ``last``, after the last."""
        notes = []
        for n, step in enumerate(SANITIZE_STEPS, 1):
            done = step(parent=self)
            nb, resources = done(nb, resources)
            notes += getattr(done, "notes", [])
            if step is CheckSubmission:  # it only checks: invalid as submitted, so say where
                valid(self, nb, f"after preprocessor {step.__name__}", submitted=resources)
            elif n == len(SANITIZE_STEPS) and last:
                valid(self, nb, f"after preprocessor {step.__name__}")
        _repairs[_ahead_key(resources)] = notes
        return nb, resources


def valid(preprocessor, nb, where: str, submitted: dict | None = None) -> None:
    """Validate ``nb`` as nbconvert validates what a preprocessor returns; if it is invalid, log
    it as nbconvert does (``where``: "after preprocessor X") and raise nbformat's error, or, for
    a notebook as ``submitted`` (its resources), refuse it naming the place (:func:`refuse`)."""
    import nbformat

    try:
        nbformat.validate(nb, relax_add_props=True)
    except nbformat.ValidationError:
        preprocessor.log.error("Notebook is invalid %s", where)
        if submitted is not None:
            refuse(submitted, notebook_format.schema_problems(nb, _file_name(submitted)))
        raise


def refuse(resources, found: list[str]) -> None:
    """Raise :class:`~autograder.submission.Refused` for the submission of ``resources``,
    naming what was ``found`` (nothing is raised if nothing was)."""
    if found:
        student = submission.shown(resources["nbgrader"]["student"])
        raise submission.Refused(f"the submission of {student} is refused: " + "; ".join(found))


def _file_name(resources) -> str:
    return submission.shown(f"{resources['nbgrader']['notebook']}.ipynb")


def _ahead_key(resources) -> tuple:
    info = resources.get("nbgrader", {})
    return tuple(str(info.get(k)) for k in ("student", "assignment", "notebook", "db_url"))


def sanitize_ahead(config, nb, resources):
    """``nb`` sanitized now as nbgrader's loop will sanitize it (:class:`Sanitize`); within
    :func:`sanitizing_ahead` the result is kept for that loop. ``nb`` is changed in place."""
    original = copy.deepcopy(nb)
    done, _ = Sanitize(config=config).steps(nb, resources)
    if _ahead is not None:
        _ahead[_ahead_key(resources)] = (original, done)
    return done


@contextlib.contextmanager
def sanitizing_ahead() -> Iterator[Callable[[str], None]]:
    """While in this block, :class:`Sanitize` takes a notebook sanitized ahead for the same
    student, lesson and notebook, if it was exactly this notebook. Yields ``forget(student)``,
    which drops what is kept for a student (the batch calls it once a student is graded)."""
    global _ahead
    previous, _ahead = _ahead, {}
    kept = _ahead

    def forget(student: str) -> None:
        for key in [k for k in kept if k[0] == student]:
            del kept[key]

    try:
        yield forget
    finally:
        _ahead = previous


# ---------------------------------------------------------------------------------------------
# execution


Supplier = Callable[[str, str, dict, dict], dict | None]
_supplier: Supplier | None = None
_kept: dict | None = None


@contextlib.contextmanager
def supply(lookup: Supplier | None = None, kept: dict | None = None) -> Iterator[None]:
    """While in this block, :class:`TrustedExecute` first asks ``lookup(student, notebook, nb,
    files)`` for a result graded elsewhere (attn-grade's workers; None: grade it here), and puts
    every result it applies into ``kept[notebook]`` (for the feedback)."""
    global _supplier, _kept
    previous = _supplier, _kept
    _supplier = lookup if lookup is not None else _supplier
    _kept = kept if kept is not None else _kept
    try:
        yield
    finally:
        _supplier, _kept = previous


def fingerprint(nb: dict, files: dict[str, bytes]) -> str:
    """What a grading result depends on: the code cells, graded-cell metadata, the files."""
    h = hashlib.sha256()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        h.update(json.dumps([cell.get("cell_type"), src, meta], sort_keys=True).encode())
    for name in sorted(files):
        h.update(
            name.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(files[name]).digest()
        )
    return h.hexdigest()


class TrustedExecute(NbGraderPreprocessor):
    """nbgrader's ``Execute`` step done by attn-grade's engine (see the module doc)."""

    timeout = Float(
        None,
        allow_none=True,
        help="Seconds per cell and per call (default: ExecutePreprocessor.timeout)",
    ).tag(config=True)
    budget = Float(300.0, help="Seconds for a whole notebook, checks included").tag(config=True)
    memory_mb = Integer(2048, help="Memory of a submission's whole sandbox (MB)").tag(config=True)
    tmp_mb = Integer(64, help="A submission's own /tmp (MB)").tag(config=True)
    processes = Integer(64, help="Processes of a submission's sandbox").tag(config=True)
    cpus = Float(
        1.0, help="Cores a submission's whole sandbox may use at once (where a cgroup caps it)"
    ).tag(config=True)
    max_output = Integer(2 * 2**20, help="Characters of output kept per notebook").tag(config=True)
    isolation = Unicode(
        "namespaces",
        help="'namespaces' (bubblewrap and Linux namespaces) or 'none': never for a class",
    ).tag(config=True)
    secret_problems = Integer(
        0,
        help="Problems per exercise drawn from a secret of each grading run, beside the "
        "checks' public ones, so that no answer can hold their results ahead (0: none; "
        "docs/grading.md, 'Secret problems')",
    ).tag(config=True)

    @functools.cached_property
    def secret_seed(self) -> int:
        """This grading run's secret: drawn once, kept in this (trusted) process."""
        return secrets.randbits(63)

    def limits(self) -> Limits:
        timeout = self.timeout
        if timeout is None:
            configured = self.config.get("ExecutePreprocessor", {}).get("timeout")
            timeout = float(configured) if isinstance(configured, int | float) else 30.0
        return Limits(
            timeout=timeout,
            budget=self.budget,
            memory_mb=self.memory_mb,
            tmp_mb=self.tmp_mb,
            cpu_seconds=int(max(120, self.budget)),
            processes=self.processes,
            cpus=self.cpus,
            max_output=self.max_output,
            secret_problems=max(0, self.secret_problems),
            secret_seed=self.secret_seed if self.secret_problems > 0 else 0,
        )

    def preprocess(self, nb, resources):
        from . import engine

        info = resources["nbgrader"]
        folder = resources.get("metadata", {}).get("path") or "."
        files = submission.files_beside(Path(folder))
        plain = json.loads(json.dumps(nb))
        result = _supplier(info["student"], info["notebook"], plain, files) if _supplier else None
        if result is None:
            if _supplier is not None:
                who = (info["notebook"], info["student"])
                self.log.warning("No prepared result for %s of %s: grading it here", *who)
            template, demos = shared_pair(info["assignment"], self.isolation)
            result = engine.grade(
                plain, template, self.limits(), files, info["student"], demos
            ).as_dict()
        repaired = _repairs.pop(_ahead_key(resources), [])
        if repaired:  # the learner hears what was set back before their notebook ran
            result = {**result, "notes": list(dict.fromkeys(repaired + result.get("notes", [])))}
        apply(nb, result)
        if _kept is not None:
            _kept[info["notebook"]] = result
        history.record(CourseDirectory(config=self.config).root, {
            "student": info["student"], "lesson": info["assignment"], "notebook": info["notebook"],
            "submission": fingerprint(plain, files)[:16], "seconds": result.get("seconds"),
            "verdicts": [{**v, "grade_id": _grade_id(nb, v["cell"])}
                         for v in result.get("verdicts", [])],
            "notes": list(result.get("notes", []))[:20],
            "repaired": repaired[:20],  # course cells set back (cells.py), for attn-grade report
        })  # fmt: skip
        return nb, resources


def _grade_id(nb, index: int) -> str:
    """The nbgrader grade id of code cell ``index`` (empty for a check outside any cell)."""
    if not 0 <= index < len(nb.cells):
        return ""
    return cells.grade_id_of(nb.cells[index]) or ""


def apply(nb, result: dict) -> None:
    """Put a grading result's outputs into the notebook's code cells."""
    import nbformat

    cells = result.get("cells", {})
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        rec = cells.get(str(index)) or {"outputs": [], "execution_count": None}
        cell.outputs = [nbformat.from_dict(o) for o in rec["outputs"]]
        cell.execution_count = rec.get("execution_count")


class SaveAutoGrades(NbgraderSaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, with a notebook's grades and comments read at once and its
    scores written in one transaction.

    nbgrader's finds every graded cell's grade and every answer cell's comment with a query of its
    own, joining six tables, and commits after each (22 of each for a lesson-02 notebook; every
    commit a wait on the disk by the gradebook's one writer). Here the notebook's grades and
    comments are read in two queries before its first cell (:func:`_rows_by_cell`), and its
    changes are written together when it is committed, once, after its last cell. The gradebook
    ends the same; a grader stopped half-way through a notebook leaves none of its new scores
    rather than some.
    """

    def preprocess(self, nb, resources):
        valid(self, nb, "before preprocessor SaveAutoGrades")  # what it scores (trusted_pipeline)
        info = resources["nbgrader"]
        self.notebook_id, self.assignment_id = info["notebook"], info["assignment"]
        self.student_id, self.db_url = info["student"], info["db_url"]
        self.gradebook = Gradebook(self.db_url)
        with self.gradebook:  # closing it rolls back what was not committed
            session, gradebook = self.gradebook.db, self.gradebook
            grades, comments = _rows_by_cell(gradebook, self.notebook_id, self.assignment_id,
                                             self.student_id)  # fmt: skip
            # what nbgrader's _add_score, _add_comment call
            gradebook.find_grade = functools.partial(_found, grades, gradebook.find_grade)
            gradebook.find_comment = functools.partial(_found, comments, gradebook.find_comment)
            session.commit = _later  # nbgrader's commit after each cell
            try:
                nb, resources = NbGraderPreprocessor.preprocess(self, nb, resources)
            finally:
                del session.commit
            session.commit()
        return nb, resources


def _later() -> None:
    """Nothing now: the session writes the changes when it is committed (or before a query)."""


def _rows_by_cell(gradebook, notebook: str, assignment: str, student: str) -> tuple[dict, dict]:
    """The grades and the comments of a student's submitted notebook, each under what nbgrader's
    ``find_grade`` and ``find_comment`` are asked for it: (cell, notebook, assignment, student).

    As nbgrader's ``find_grade`` looks for a grade cell of the name before a task cell, and
    ``find_comment`` for an answer cell before a task cell, a task cell's row is taken only where
    no other has the name."""
    from nbgrader.api import BaseCell, Comment, Grade

    submitted = gradebook.find_submission_notebook(notebook, assignment, student)
    found = []
    for row, first in ((Grade, "GradeCell"), (Comment, "SolutionCell")):
        pairs = (
            gradebook.db.query(BaseCell.name, BaseCell.type, row)
            .join(BaseCell, BaseCell.id == row.cell_id)
            .filter(row.notebook_id == submitted.id)
        )
        ordered = sorted(pairs, key=lambda pair: pair[1] == first)  # the preferred ones last
        found.append({(name, notebook, assignment, student): entry for name, _, entry in ordered})
    return found[0], found[1]


def _found(rows: dict, find: Callable, *key: str):
    """The row read ahead for ``key`` (cell, notebook, assignment, student), else ``find(*key)``:
    nbgrader's query, which raises ``MissingEntry`` for a cell that has none."""
    return rows[key] if key in rows else find(*key)


class ShowProse(NbGraderPreprocessor):
    """Show every Markdown and raw cell that is not one of the lesson's own as text.

    formgrader and the feedback page render the graded notebook; a cell the learner wrote or
    changed is shown verbatim, never as HTML, links or mathematics (:mod:`autograder.prose`).
    It runs after :class:`RestoreCells`, which gave every course cell back its type (an answer
    cell a learner turned into Markdown is code again) and every locked one its source; what
    decides is the lesson's source and released notebooks, never a tag in this one.
    """

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        course = prose.course_cells(
            Path(coursedir.format_path(folder, ".", info["assignment"]))
            / f"{info['notebook']}.ipynb"
            for folder in (coursedir.source_directory, coursedir.release_directory)
        )
        prose.show_safely(nb, course)
        return nb, resources


SANITIZE_STEPS = [CheckSubmission, ClearOutput, Deduplicate, OverwriteKernelspec, RestoreCells,
                  ShowProse, CheckCellMetadata]  # fmt: skip
SANITIZE = [Sanitize]
AUTOGRADE = [TrustedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
             SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]  # fmt: skip


def trusted_pipeline(c) -> None:
    """Set nbgrader's documented traits on config ``c`` for the course's trusted pipeline
    (``nbgrader_config.py`` and ``attn-grade batch`` both call this, so both grade alike).

    nbconvert validates a notebook after every preprocessor of a list, each a few milliseconds
    for a lesson's notebook, which the gradebook's one writer spends on every student; with
    ``optimistic_validation`` it validates once, after the last. What comes from outside is still
    validated where it enters, before anything is decided on it: the submission as read
    (:class:`Sanitize`, after :class:`CheckSubmission`) and the sandbox's outputs, which
    :class:`SaveAutoGrades` validates before it scores them. The steps in between are trusted
    code, whose every change the last validation sees."""
    c.Autograde.sanitize_preprocessors = SANITIZE
    c.Autograde.autograde_preprocessors = AUTOGRADE
    c.Autograde.pre_convert_hook = guard_copy  # nothing of a refused submission is copied
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back and graded
    c.NotebookExporter.optimistic_validation = True
