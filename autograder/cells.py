"""What a learner can do to the course's cells by accident, and the one way every judge undoes it.

A notebook's course cells carry nbgrader's tag (``metadata.nbgrader``: the grade id, the cell's
role, its type). Two everyday accidents change them:

* a cell copied in JupyterLab keeps its tag, so two cells claim one grade id. nbgrader's own
  ``DeduplicateIds`` then leaves the earlier copies an empty tag, on which its ``OverwriteCells``
  fails: the student gets no grade at all, only ``KeyError: 'grade_id'`` (jupyter/nbgrader#1083);
* an answer cell turned into Markdown (``M`` in command mode) is run as code again when graded,
  as the course made it, but skipped by a self-check that reads the notebook as it is.

So every way of judging a notebook repairs it the same way first: of the cells sharing a grade
id, the last keeps the tag and the others run as ordinary cells (nbgrader's intent: the copy
nearest the end is the learner's latest); a tag without a grade id is dropped; and a course cell
is given back the type its tag records. Grading applies these with the gradebook as the authority
(:class:`autograder.nbgrader_plugin.RestoreCells` rebuilds each tag from it);
``attn-grade check`` and ``pytest --attn-notebook`` with the tags the notebook carries. Each
repair returns a note for the learner, which the check prints and the feedback lists.
"""

from __future__ import annotations

from collections import Counter

from nbformat.v4.nbbase import random_cell_id, validate

TYPES = ("code", "markdown", "raw")


def grade_id_of(cell: dict) -> str | None:
    """The cell's nbgrader grade id, or None (no tag, or a tag without a usable id)."""
    tag = cell.get("metadata", {}).get("nbgrader")
    grade_id = tag.get("grade_id") if isinstance(tag, dict) else None
    return grade_id if isinstance(grade_id, str) and grade_id else None


def deduplicate(nb: dict) -> list[str]:
    """Keep the nbgrader tag of the last cell with each grade id; remove it from the earlier
    copies and from every tag without a grade id (they run as ordinary cells). The notes."""
    copies = Counter(grade_id_of(c) for c in nb.get("cells", []))
    seen: set[str] = set()
    for cell in reversed(nb.get("cells", [])):
        meta = cell.get("metadata", {})
        if "nbgrader" not in meta:
            continue
        grade_id = grade_id_of(cell)
        if grade_id is None or grade_id in seen:
            del meta["nbgrader"]
        else:
            seen.add(grade_id)
    return [
        f"cell {grade_id[:60]} appears {n} times (a copy keeps nbgrader's label of the original): "
        "the last copy counts as that cell, the others run as ordinary cells; delete the copies "
        "you do not need"
        for grade_id, n in copies.items()
        if grade_id is not None and n > 1
    ]


def restore_type(cell: dict, cell_type: str | None) -> str | None:
    """Make ``cell`` a ``cell_type`` cell again, its source kept; a note if it was not one."""
    was = cell.get("cell_type")
    if cell_type not in TYPES or was == cell_type:
        return None
    cell["cell_type"] = cell_type
    for key in ("outputs", "execution_count", "attachments"):
        cell.pop(key, None)
    if cell_type == "code":
        cell["outputs"], cell["execution_count"] = [], None
    validate(cell, f"{cell_type}_cell")
    how = " (select it and press Y)" if cell_type == "code" else ""
    return (
        f"cell {grade_id_of(cell)} was turned into a {was} cell: it runs as the {cell_type} "
        f"cell the lesson made it; turn it back{how} to see in JupyterLab what grading sees"
    )


def course_type(tag: dict) -> str | None:
    """The type of a course cell, from its nbgrader tag: the type it records (a released
    notebook's tags do), else the one its role allows (an answer checked by tests, or a test, is
    code)."""
    if tag.get("cell_type") in TYPES:
        return tag["cell_type"]
    answer = tag.get("solution") and not tag.get("grade")
    test = tag.get("grade") and not tag.get("solution") and not tag.get("task")
    return "code" if answer or test else None


def restore_types(nb: dict) -> list[str]:
    """Give every course cell back the type its nbgrader tag says it has. The notes."""
    notes = []
    for cell in nb.get("cells", []):
        if grade_id_of(cell) is not None:
            note = restore_type(cell, course_type(cell["metadata"]["nbgrader"]))
            notes += [note] if note else []
    return notes


def give_id(nb: dict, cell: dict) -> dict:
    """``cell``, about to be put into ``nb``, with an id no cell of ``nb`` has, if the notebook's
    format has cell ids (nbformat 4.5 and later: nbgrader's put-back cells have none)."""
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        taken = {c.get("id") for c in nb.get("cells", [])}
        cell["id"] = next(i for i in iter(random_cell_id, None) if i not in taken)
    return cell


def repair(nb: dict) -> list[str]:
    """The self-check's repair (grading's rebuilds the tags from the gradebook instead): copies
    deduplicated, types restored. ``nb`` is changed in place; the notes."""
    return deduplicate(nb) + restore_types(nb)
