"""What a submission may be: regular files in plain folders, nothing followed, nothing special.

A student controls what is in their submission folder. A symbolic link there could point at
another student's notebook (graded as theirs) or at the gradebook (copied into their feedback); a
FIFO or device could hang or flood the grader. So a submission is refused, with a message naming
the entry, when anything in it — the notebook included — is not a regular file or a directory;
and the grader reads files with ``O_NOFOLLOW``, never through a link. Folder and file names that
are not valid UTF-8 are refused the same way: nbgrader's gradebook and the reports could not
spell them; so is a student folder whose name holds ``<`` or ``"``, which formgrader would put
into the instructor's page as markup (nbgrader takes a student's id from the name of the file a
student puts into its exchange). So is a ``timestamp.txt`` that holds no time nbgrader can read:
nbgrader reads it before anything else and stops on it.

A notebook is bounded too, before the grader parses it: its file, its cells and their source
(:func:`notebook_problems`). Its JSON is read into memory whole, and every code cell is parsed on
the trusted side at some hundreds of bytes of memory per byte of code, so a 30 MB cell would take
the grader's process about 12 GB and a hundred thousand empty cells a minute of its time. The
bounds are far above any lesson's notebook (``tests/test_submission_bounds.py`` keeps them so).
"""

from __future__ import annotations

import json
import os
import stat
import unicodedata
from collections.abc import Callable
from pathlib import Path

MAX_FILES = 200
MAX_BYTES = 64 * 2**20  # of files beside the notebooks, in all
MAX_NOTEBOOK_BYTES = 16 * 2**20  # one notebook's file, outputs included
MAX_CELLS = 1_000  # in one notebook (the longest lesson has 94)
MAX_CELL_SOURCE = 64 * 2**10  # characters of source in one cell (a lesson's longest: about 5,000)
MAX_SOURCE = 2**20  # characters of source in all of a notebook's cells (lesson 06: about 92,000)
MAX_NESTING = 64  # levels of a notebook's JSON (a lesson's, graded: 8; 900 took nbgrader past
# Python's recursion limit, and the student got an error where a line saying why is due)
# what a notebook too large is told (its outputs count: nbformat reads them too)
OUTPUTS_INCLUDED = "outputs included (Edit → Clear Outputs of All Cells makes it smaller)"
TIMESTAMP = "timestamp.txt"  # when it was submitted, written by nbgrader submit; nbgrader reads it
TIMESTAMP_BYTES = 64  # whole, on the instructor's side ("2026-11-29 03:00:00.123456 UTC": 30)
# nbgrader's formgrader puts a student's id into its page of a submission as it is, in the text
# of the page and in a double-quoted attribute: an id holding either of these would be HTML there
MARKUP = '<"'


class Refused(Exception):
    """A submission that is not graded; the message says why, for the student and instructor."""


class TooLarge(Refused):
    """A file larger than it may be (:func:`read`)."""


def shown(name: str) -> str:
    """A file or folder name as text that any report can print (undecodable bytes escaped)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def printable(name: str) -> str:
    """``shown(name)`` with control characters and line breaks escaped (``\\n``, ``\\x1b``), so
    a name cannot start a line of its own in a log or report, or move the terminal's cursor."""
    return "".join(repr(c)[1:-1] if _breaks_lines(c) else c for c in shown(name))


def _breaks_lines(c: str) -> bool:
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def name_problems(student: str, what: str = "the student folder's name") -> list[str]:
    """Why a student id cannot be graded under (nbgrader globs and strips it); ``what`` says
    where it was read (a folder of ``submitted/``, by default)."""
    if shown(student) != student:
        return [f"{what} ({shown(student)}) is not valid UTF-8"]
    if any(_breaks_lines(c) for c in student):
        return [f"{what} ({printable(student)}) holds a control character or line break, which "
                "logs and reports would print as something else"]  # fmt: skip
    if student != student.strip():
        return [f"{what} ({student}) begins or ends with a space"]
    if any(c in student for c in "*?[]"):
        return [f"{what} ({student}) holds *, ?, [ or ], which nbgrader reads as a pattern"]
    if any(c in student for c in MARKUP):
        return [f"{what} ({student}) holds < or \", which formgrader's pages would read as HTML"]
    return []


def problems(
    folder: Path, student_dir: Path | None = None, notebooks: list[str] | None = None
) -> list[str]:
    """Why ``folder`` (a student's submission of one lesson) cannot be graded; empty if fine.

    ``notebooks`` names (without ``.ipynb``) the notebooks grading will read, whose bounds are
    checked (:func:`notebook_problems`); None checks every notebook in ``folder`` itself.
    """
    found = name_problems(student_dir.name) if student_dir is not None else []
    if found:
        return found
    for path in [p for p in (student_dir, folder) if p is not None]:
        try:
            mode = os.lstat(path).st_mode
        except OSError as error:
            return [f"{shown(str(path))} cannot be read ({error.strerror})"]
        if not stat.S_ISDIR(mode):
            found.append(f"{shown(path.name)} is {kind(mode)}, not a folder")
    if found:
        return found
    count = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in [*dirnames, *filenames]:
            count += 1
            path = os.path.join(dirpath, name)
            rel = shown(os.path.relpath(path, folder))
            if shown(name) != name:
                found.append(f"{rel}: the name is not valid UTF-8")
                continue
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append(f"{rel} is {kind(mode)}; a submission holds only regular files")
        if count > MAX_FILES:
            found.append(f"more than {MAX_FILES} files")
            break
    if found:
        return found
    if notebooks is None:
        paths = sorted(Path(folder).glob("*.ipynb"))
    else:
        paths = [Path(folder) / f"{name}.ipynb" for name in notebooks]
    for path in paths:
        if os.path.lexists(path):
            found += notebook_problems(path)
    return found or timestamp_problems(folder)


def notebook_problems(path: Path) -> list[str]:
    """Why the grader will not read the notebook at ``path`` further: a file, nesting, cells or
    source beyond the bounds (``MAX_NOTEBOOK_BYTES``, ``MAX_NESTING``, ``MAX_CELLS``,
    ``MAX_CELL_SOURCE``, ``MAX_SOURCE``), or a format version that is not a whole number.

    Empty if it is within them, and for a file that is no notebook at all: nbgrader names that
    problem itself, as for any student.
    """
    name = shown(Path(path).name)
    try:
        data = read(path, MAX_NOTEBOOK_BYTES)
    except TooLarge:
        return [_too_large(name)]
    except Refused as error:
        return [str(error)]
    try:
        nb = json.loads(data)
    except RecursionError:  # deeper than Python's decoder goes
        return [_nests(name)]
    except ValueError:
        return []
    return content_problems(nb, name)


def saved_problems(nb: dict, name: str) -> list[str]:
    """:func:`notebook_problems` of notebook ``nb`` (read by nbformat) as Jupyter saves it, named
    ``name``: nbgrader's Validate gets the notebook read, not its file."""
    import nbformat

    if len(nbformat.writes(nb).encode()) > MAX_NOTEBOOK_BYTES:
        return [_too_large(name)]
    return content_problems(nb, name)


def content_problems(nb, name: str) -> list[str]:
    """Nesting, cells or source of notebook ``nb`` (its JSON, as read) beyond the bounds, or its
    format version not a whole number."""
    if deeper_than(nb, MAX_NESTING, _containers):
        return [_nests(name)]
    if found := _version_problems(nb, name):
        return found
    cells = _cells(nb)
    if len(cells) > MAX_CELLS:
        return [f"{name} holds {len(cells):,} cells, more than the {MAX_CELLS:,} a notebook may "
                "hold"]  # fmt: skip
    total = 0
    for number, cell in enumerate(cells, 1):
        source = _source(cell)
        if len(source) > MAX_CELL_SOURCE:
            begins = printable(source.lstrip().split("\n", 1)[0][:40])
            return [f"cell {number} of {name} (it begins {begins!r}) holds {len(source):,} "
                    f"characters, more than the {MAX_CELL_SOURCE:,} a cell may hold"]  # fmt: skip
        total += len(source)
    if total > MAX_SOURCE:
        return [f"the cells of {name} hold {total:,} characters in all, more than the "
                f"{MAX_SOURCE:,} a notebook may hold"]  # fmt: skip
    return []


def _version_problems(nb, name: str) -> list[str]:
    """A format version that is not a whole number: nbformat stops on it with a bare
    ``AssertionError`` (``nbformat_minor`` NaN, a string or null), or worse."""
    for key in ("nbformat", "nbformat_minor") if isinstance(nb, dict) else ():
        if key in nb and not isinstance(nb[key], int):
            given = printable(json.dumps(nb[key]))
            given = given if len(given) <= 40 else given[:39] + "…"
            return [f"{name} gives {key} as {given}, where a notebook gives a whole number "
                    "(Jupyter writes nbformat 4, nbformat_minor 5)"]  # fmt: skip
    return []


def _too_large(name: str) -> str:
    return f"{larger_than(name, MAX_NOTEBOOK_BYTES)}, {OUTPUTS_INCLUDED}"


def _nests(name: str) -> str:
    return (
        f"{name} nests its JSON more than {MAX_NESTING} levels deep (a lesson's notebook, graded, "
        "nests 8)"
    )


def deeper_than(root, depth: int, children: Callable) -> bool:
    """Whether ``root`` nests more than ``depth`` levels deep, ``children(node)`` being a node's
    children (walked without recursion: the tree may be deeper than Python's stack)."""
    todo = [(root, 1)]
    while todo:
        node, level = todo.pop()
        if level > depth:
            return True
        todo += [(child, level + 1) for child in children(node)]
    return False


def _containers(value) -> list:
    """The lists and objects directly inside JSON ``value``: its levels of nesting."""
    inside = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [child for child in inside if isinstance(child, dict | list)]


def _cells(nb) -> list:
    """A notebook's cells as its JSON holds them: ``cells``, or in a version 3 notebook (which
    nbformat converts on reading) the cells of every worksheet."""
    if not isinstance(nb, dict):
        return []
    if isinstance(nb.get("cells"), list):
        return nb["cells"]
    cells = []
    sheets = nb.get("worksheets")
    for sheet in sheets if isinstance(sheets, list) else []:
        if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list):
            cells += sheet["cells"]
    return cells


def _source(cell) -> str:
    """A cell's source (a string, or a list of lines; ``input`` in version 3's code cells)."""
    if not isinstance(cell, dict):
        return ""
    source = cell.get("source", cell.get("input", ""))
    if isinstance(source, list):
        return "".join(line for line in source if isinstance(line, str))
    return source if isinstance(source, str) else ""


def timestamp_problems(folder: Path) -> list[str]:
    """Why nbgrader could not read the submission time in ``folder`` (nothing, if none is there).

    nbgrader reads a submission's ``timestamp.txt`` whole before anything else and stops on a
    text that is no time (naming none of it to the student), and its collect then stops for the
    whole class; ``nbgrader submit`` always writes one it can read.
    """
    path = Path(folder) / TIMESTAMP
    if not os.path.lexists(path):
        return []
    try:
        data = read(path, TIMESTAMP_BYTES)
    except Refused:
        return [f"{TIMESTAMP} holds more than {TIMESTAMP_BYTES} bytes, so no submission time"]
    text = data.decode("utf-8", "replace").strip()
    try:
        from nbgrader.utils import parse_utc

        if text:  # nbgrader reads an empty one as no time
            parse_utc(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, OverflowError):
        return [f"{TIMESTAMP} holds {text!r}, not a submission time (nbgrader submit writes one)"]
    return []


def kind(mode: int) -> str:
    """What a file of ``mode`` (from ``lstat``) is, in words: "a symbolic link", "a file", ..."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a file"
    return "not a regular file"


def read(path: Path, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, never through a link (``O_NOFOLLOW``), at most ``limit``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{shown(Path(path).name)} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(larger_than(shown(Path(path).name), limit))
    return data


def larger_than(name: str, limit: int) -> str:
    return f"{name} is larger than {limit // 2**20} MB"


def files_beside(
    folder: Path, limit: int = MAX_BYTES, ignore: list[str] | None = None
) -> dict[str, bytes]:
    """The regular files in ``folder`` other than notebooks (what the notebook may open).

    With ``ignore`` (nbgrader's ``CourseDirectory.ignore`` globs), only the files nbgrader's
    autograde copies from ``folder``: one matching a glob, or inside a folder that does, is left
    out (``nbgrader.utils.is_ignored``, as its ``find_all_files`` applies it).
    """
    ignored = _ignored(ignore)
    files, total = {}, 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".ipynb_checkpoints")
                       and not ignored(os.path.join(dirpath, d))]  # fmt: skip
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith(".ipynb") or ignored(path):
                continue
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            data = read(Path(path), limit - total)
            total += len(data)
            files[os.path.relpath(path, folder)] = data
    return files


def _ignored(ignore: list[str] | None) -> Callable[[str], bool]:
    """Whether nbgrader's autograde leaves a path out, given its ``ignore`` globs (None: nothing
    is left out, and nbgrader, slow to import, is not loaded: a learner's check needs none of
    it)."""
    if ignore is None:
        return lambda path: False
    from nbgrader.utils import is_ignored

    globs = [*ignore, "*.ipynb"]
    return lambda path: is_ignored(path, globs)
