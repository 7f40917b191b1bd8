"""Markdown and raw cells as formgrader and the feedback pages show them.

nbgrader shows a graded notebook as HTML through nbconvert — formgrader's view of a submission,
in the instructor's own Jupyter server, and the feedback page — and nbconvert renders Markdown as
written: raw HTML, ``javascript:`` links and MathJax's ``\\href`` reach the page, where they run
with the instructor's session (whose server can change every grade). So a Markdown or raw cell
is shown as written only when it is the course's own: the same type, text and attachments as a
cell of the lesson's source or released notebook (:func:`course_cells`). Every other one, which
the learner wrote or changed, is shown as text (:func:`as_text`): Markdown as one fenced code
block, raw as escaped text in a ``<pre>`` — verbatim, in a box MathJax skips. What the notebook
says of a cell (nbgrader's ``locked``, which a learner can write) decides nothing.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterable
from pathlib import Path

TEXT_TYPES = ("markdown", "raw")
# above a cell shown as text, for the instructor in formgrader and the student in the feedback
CAPTION = "Text of the submission, shown as typed (not rendered):"
_BACKTICKS = re.compile(r"`+")


def key(cell: dict) -> tuple[str, str, str]:
    """What makes a Markdown or raw cell the course's: its type, text and attachments."""
    attachments = json.dumps(cell.get("attachments") or {}, sort_keys=True, default=str)
    return cell.get("cell_type", ""), _source(cell), attachments


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(line for line in source if isinstance(line, str))
    return source if isinstance(source, str) else ""


def course_cells(notebooks: Iterable[Path]) -> frozenset[tuple[str, str, str]]:
    """The :func:`key` of every Markdown and raw cell of the course's ``notebooks`` that exist
    (each file read once while it is unchanged). A file that is missing or cannot be read adds
    nothing: then more cells show as text, never fewer."""
    found: set[tuple[str, str, str]] = set()
    for path in notebooks:
        try:
            stat = path.stat()
            found |= _cells_of(str(path), stat.st_mtime_ns, stat.st_size)
        except Exception:  # noqa: BLE001 — missing, unreadable or not a notebook
            continue
    return frozenset(found)


@functools.lru_cache(maxsize=64)
def _cells_of(path: str, mtime_ns: int, size: int) -> frozenset[tuple[str, str, str]]:
    del mtime_ns, size  # the cache's key: a changed file is read again
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return frozenset(key(cell) for cell in nb.cells if cell.cell_type in TEXT_TYPES)


def fenced(text: str) -> str:
    """``text`` as one Markdown fenced code block that shows it verbatim: the fence is longer
    than any run of backticks in it, so no line of ``text`` can close it."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def as_text(cell: dict) -> None:
    """Make the Markdown or raw ``cell`` show its text verbatim, as text, under a line that
    says so (:data:`CAPTION`); its attachments go."""
    cell.pop("attachments", None)
    if cell["cell_type"] == "markdown":
        cell["source"] = f"*{CAPTION}*\n\n{fenced(_source(cell))}"
    else:  # nbconvert puts a raw cell for HTML (or of no type) into the page as it is
        text = html.escape(_source(cell), quote=False)
        cell["source"] = f"<p><em>{CAPTION}</em></p><pre>{text}</pre>"
        cell.setdefault("metadata", {})["raw_mimetype"] = "text/html"


def show_safely(nb: dict, course: frozenset[tuple[str, str, str]]) -> None:
    """Every Markdown and raw cell of ``nb`` that is not one of ``course``'s, shown as text."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") in TEXT_TYPES and key(cell) not in course:
            as_text(cell)
