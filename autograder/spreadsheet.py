"""CSV files an instructor opens in a spreadsheet: no text cell is read as a formula.

A student id is the name of a folder the student chose (``=cmd|calc!A0`` is one the grader
accepts), and an error or a problem may quote the notebook; a spreadsheet that opens the CSV
runs a cell that starts like a formula. Every such cell gets a leading ``'``, which
spreadsheets show as text (OWASP, "CSV Injection").
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe(value: object) -> object:
    """``value``, with a ``'`` before a text that a spreadsheet would read as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """``header`` and ``rows`` as a CSV file at ``path`` (UTF-8), every text cell :func:`safe`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            writer.writerow([safe(value) for value in row])
