"""``attn-grade``: the learner's self-check and the instructor's fast, isolated batch grader.

    attn-grade check NOTEBOOK [--json] [--timeout S] [--memory MB] [--no-record]
    attn-grade batch LESSON --course DIR [--workers N] [--timeout S] [--memory MB]
                     [--json] [--csv PATH] [--force] [--no-progress] [--no-feedback]

See docs/grading.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import executor, isolation


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attn-grade", description="Self-check and batch grading for the attention course."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="check your notebook: ✓/✗ per exercise, with diagnosis")
    check.add_argument("notebook", type=Path)
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds per cell (60)")
    check.add_argument("--memory", type=int, default=2048, help="MB of memory for your code")
    check.add_argument("--no-record", action="store_true", help="do not record mastery")

    batch = sub.add_parser("batch", help="grade every submitted/*/LESSON into the gradebook")
    batch.add_argument("lesson")
    batch.add_argument("--course", type=Path, default=Path("."), help="nbgrader course folder")
    batch.add_argument(
        "--workers", type=int, default=(os.cpu_count() or 1) + 1, help="warm workers (cores + 1)"
    )
    batch.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per cell (default: the course's ExecutePreprocessor.timeout)",
    )
    batch.add_argument("--memory", type=int, default=2048, help="MB of memory per submission")
    batch.add_argument("--json", action="store_true", help="print the results as JSON")
    batch.add_argument("--csv", type=Path, help="also write the results to this CSV file")
    batch.add_argument("--force", action="store_true", help="regrade students already graded")
    batch.add_argument("--no-progress", action="store_true")
    batch.add_argument("--no-feedback", action="store_true", help="write no attn-feedback.md")
    batch.add_argument("--log-level", default="ERROR", help="nbgrader's log level (ERROR)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    return _batch(args)


def _check(args) -> int:
    from .notebook import NotebookError
    from .selfcheck import run_check

    limits = isolation.Limits(
        timeout=args.timeout, memory_mb=args.memory, cpu_seconds=max(120, int(args.timeout * 10))
    )
    try:
        report = run_check(args.notebook, limits, record=not args.no_record)
    except NotebookError as error:
        if args.json:
            print(
                json.dumps({"notebook": str(args.notebook), "passed": False, "error": str(error)})
            )
        else:
            print(f"✗ {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        print(report.text())
    return 0 if report.passed else 1


def _batch(args) -> int:
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own SAWarnings

    course = args.course.resolve()
    if not (course / "nbgrader_config.py").exists() and not (course / "gradebook.db").exists():
        print(f"attn-grade: {course} does not look like an nbgrader course", file=sys.stderr)
        return 2
    timeout = args.timeout if args.timeout is not None else _course_timeout(course)
    limits = isolation.Limits(
        timeout=timeout, memory_mb=args.memory, cpu_seconds=max(120, int(timeout * 10))
    )
    from .worker import Pool, sandbox_options

    # Start the warm workers first: they import NumPy, PyTorch and IPython while nbgrader loads.
    pictures = executor.picture_cells(course, args.lesson)
    pool = Pool(max(1, args.workers), sandbox_options(limits, picture_cells=pictures))
    from .batch import BatchOptions, run_batch, summary_table, write_csv

    options = BatchOptions(
        workers=max(1, args.workers),
        limits=limits,
        force=args.force,
        progress=not args.no_progress and not args.json,
        feedback=not args.no_feedback,
        log_level=args.log_level,
    )

    try:
        results = run_batch(course, args.lesson, options, pool)
    finally:
        pool.close()
    if args.csv:
        write_csv(results, args.csv)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2, ensure_ascii=False))
    else:
        print(summary_table(results))
    return 1 if any(r.status == "error" for r in results) else 0


def _course_timeout(course: Path) -> float:
    """The course's nbgrader cell timeout (``c.ExecutePreprocessor.timeout``), else 30 s."""
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        value = config.ExecutePreprocessor.timeout
        return float(value) if isinstance(value, int | float) else 30.0
    except Exception:  # noqa: BLE001
        return 30.0


if __name__ == "__main__":
    sys.exit(main())
