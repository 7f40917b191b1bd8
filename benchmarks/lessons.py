"""How long each lesson's source notebook takes to run top to bottom, and with full marks.

    .venv/bin/python -m benchmarks.lessons [--lessons 06-build-and-train ...] [--out DIR]
                                           [--executed DIR]

Runs every ``solutions/<lesson>/*.ipynb`` in a fresh Jupyter kernel (nbclient), as a learner's
*Run All* does (``NBGRADER_EXECUTION`` unset: the full training runs of lesson 06 included),
and records the wall clock and whether any cell failed. The budgets (docs/writing-lessons.md):
60 s for lessons 01–05, 5 minutes for lesson 06. Results go to ``DIR/lessons.md`` and
``DIR/lessons.json`` (default ``benchmarks/results/``); with ``--executed DIR`` the executed
notebooks are kept there too, to read the numbers a full run prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from benchmarks.machine import run_context

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
BUDGET = {"06-build-and-train": 300.0}  # seconds; every other lesson: DEFAULT_BUDGET
DEFAULT_BUDGET = 60.0


def run_lesson(path: Path, executed: Path | None = None) -> dict:
    nb = nbformat.read(path, as_version=4)
    env_before = os.environ.pop("NBGRADER_EXECUTION", None)
    started = time.perf_counter()
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()  # fmt: skip
    finally:
        if env_before is not None:
            os.environ["NBGRADER_EXECUTION"] = env_before
    seconds = time.perf_counter() - started
    if executed is not None:
        executed.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed / path.name)
    failed = [
        f"cell {i}: {o.ename}"
        for i, cell in enumerate(nb.cells)
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    return {"seconds": round(seconds, 1), "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--executed", type=Path, default=None,
                        help="keep the executed notebooks in this directory")  # fmt: skip
    args = parser.parse_args(argv)
    lessons = args.lessons or sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())
    rows = {}
    for lesson in lessons:
        for path in sorted((REPO / "solutions" / lesson).glob("*.ipynb")):
            print(f"running {path.relative_to(REPO)} ...", file=sys.stderr, flush=True)
            rows[str(path.relative_to(REPO))] = {
                "lesson": lesson,
                **run_lesson(path, args.executed),
            }
    result = {
        "machine": run_context(),
        "notebooks": rows,
    }  # fmt: skip
    lines = [
        "# Lesson notebooks, top to bottom",
        "",
        "| notebook | wall clock | budget | within | failed cells |",
        "|---|---|---|---|---|",
    ]
    ok = True
    for name, row in rows.items():
        budget = BUDGET.get(row["lesson"], DEFAULT_BUDGET)
        within = row["seconds"] <= budget and not row["failed"]
        ok = ok and within
        failed = ", ".join(row["failed"]) or "—"
        verdict = "yes" if within else "NO"
        lines.append(
            f"| `{name}` | {row['seconds']:.1f} s | {budget:.0f} s | {verdict} | {failed} |"
        )
    m = result["machine"]
    lines += ["", f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, load average "
              f"{m['load_before']:.2f} at the start.", ""]  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lessons.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "lessons.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
