"""``attn-grade``: the learner's self-check and the instructor's fast, isolated batch grader.

    attn-grade check NOTEBOOK [--json] [--timeout S] [--memory MB] [--no-record]
    attn-grade batch LESSON --course DIR [--workers N] [--timeout S] [--budget S] [--memory MB]
                     [--json] [--csv PATH] [--force] [--no-progress] [--no-feedback]
                     [--dask ADDRESS|local:N|gateway:NAME] [--no-isolation] [--secret-problems N]
    attn-grade report (LESSON | --all) --course DIR [--html PATH] [--csv DIR] [--json]
                      [--stuck N]
    attn-grade feedback LESSON --course DIR [--workers N] [--force] [--json] [--no-progress]

See docs/grading.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from . import names, view
from .limits import Limits

UNISOLATED = """\
WARNING: --no-isolation: learner code will run WITHOUT a sandbox, as {user}, with your files,
your network and your other processes within its reach. A hostile notebook can change grades,
read other students' work and the answer keys. Never grade a class like this.
"""

STUDENT_HELP = (
    "only these students: an id, or a glob as nbgrader's --student ('s0*'); all by default"
)


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
    check.add_argument("--tmp", type=int, default=64, help="MB of your /tmp and files (64)")
    check.add_argument("--no-record", action="store_true", help="do not record mastery")

    batch = sub.add_parser("batch", help="grade every submitted/*/LESSON into the gradebook")
    batch.add_argument("lesson")
    batch.add_argument("--course", type=Path, default=Path("."), help="nbgrader course folder")
    batch.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="workers (one per core)"
    )
    batch.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per cell and per call (default: the course's ExecutePreprocessor.timeout)",
    )
    batch.add_argument(
        "--budget", type=float, default=300.0, help="seconds per notebook, checks included (300)"
    )
    batch.add_argument("--memory", type=int, default=2048, help="MB of memory per submission")
    batch.add_argument("--tmp", type=int, default=64, help="MB of /tmp and files (64)")
    batch.add_argument(
        "--cpus",
        type=float,
        default=1.0,
        help="cores each submission may use at once, where a cgroup can cap it (1; 0: no cap)",
    )
    batch.add_argument(
        "--secret-problems",
        type=int,
        metavar="N",
        help="problems per exercise drawn from a secret of this batch, beside the checks' "
        "public ones (default: the course's TrustedExecute.secret_problems, else 0)",
    )
    batch.add_argument("--json", action="store_true", help="print the results as JSON")
    batch.add_argument("--csv", type=Path, help="also write the results to this CSV file")
    batch.add_argument("--force", action="store_true", help="regrade students already graded")
    batch.add_argument("--student", default="*", metavar="ID", help=STUDENT_HELP)
    batch.add_argument("--no-progress", action="store_true")
    batch.add_argument("--no-feedback", action="store_true", help="write no attn-feedback.md")
    batch.add_argument("--log-level", default="ERROR", help="nbgrader's log level (ERROR)")
    batch.add_argument(
        "--dask",
        metavar="ADDRESS",
        type=_dask_address,
        help="grade on a Dask cluster: its scheduler address (tcp://host:8786), local:N for N "
        "local workers, or gateway:NAME for a Dask Gateway cluster; the same isolation on every "
        "worker",
    )
    batch.add_argument(
        "--no-isolation",
        action="store_true",
        help="run learner code without a sandbox (DANGEROUS: never for a class)",
    )

    feedback = sub.add_parser(
        "feedback", help="nbgrader's HTML feedback for every graded student, several at a time"
    )
    feedback.add_argument("lesson")
    feedback.add_argument("--course", type=Path, default=Path("."), help="nbgrader course folder")
    feedback.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="students at a time, each in a process of its own (default: one per core)",
    )
    feedback.add_argument("--force", action="store_true", help="write feedback already written")
    feedback.add_argument("--student", default="*", metavar="ID", help=STUDENT_HELP)
    feedback.add_argument("--json", action="store_true", help="print the results as JSON")
    feedback.add_argument("--no-progress", action="store_true")
    feedback.add_argument("--log-level", default="ERROR", help="nbgrader's log level (ERROR)")

    report = sub.add_parser(
        "report", help="class analytics: scores, named mistakes, mastery, stuck students"
    )
    report.add_argument("lesson", nargs="?", help="a lesson (or --all)")
    report.add_argument("--all", action="store_true", help="every lesson with submissions")
    report.add_argument("--course", type=Path, default=Path("."), help="nbgrader course folder")
    report.add_argument("--html", type=Path, metavar="PATH", help="write a self-contained page")
    report.add_argument("--csv", type=Path, metavar="DIR", help="write one CSV per table here")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.add_argument(
        "--stuck",
        type=int,
        default=None,
        metavar="N",
        help="stuck: the same mistake in each of the last N distinct submissions (3)",
    )
    return parser


def skip_iri_grammars() -> None:
    """Leave jsonschema's optional "iri" format checker unloaded in this process.

    Importing nbformat imports jsonschema, which imports ``rfc3987_syntax`` if it is installed
    (it is: Jupyter's ``jsonschema[format-nongpl]``); that module compiles about 35 Earley
    grammars at import — a second of CPU in every process that reads a notebook (jsonschema
    issue #1428). No schema that nbformat, nbgrader or this course validates asks for the
    "iri" formats, and nothing here checks formats at all, so ``attn-grade`` tells Python the
    module is absent: jsonschema then does what it does when the package is not installed.
    A process that has already imported jsonschema is left as it is.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)


def main(argv: list[str] | None = None) -> int:
    skip_iri_grammars()
    args = _parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    if args.command == "report":
        return _report(args)
    if args.command == "feedback":
        return _feedback(args)
    return _batch(args)


def _check(args) -> int:
    from .notebook import NotebookError
    from .selfcheck import run_check

    limits = Limits(
        timeout=args.timeout,
        budget=max(300.0, args.timeout * 10),
        memory_mb=args.memory,
        tmp_mb=args.tmp,
        cpu_seconds=max(120, int(args.timeout * 10)),
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
    course = _course(args.course)
    if course is None:
        return 2
    if args.no_isolation:
        isolation = "none"
        print(UNISOLATED.format(user=_user()), file=sys.stderr)
    else:
        isolation = "namespaces"
        problem = view.probe()
        if problem:
            print(
                f"attn-grade: cannot isolate submissions: {problem}.\n"
                "Install bubblewrap, or pass --no-isolation to grade without a sandbox "
                "(never for a class).",
                file=sys.stderr,
            )
            return 2
    from .journal import unfinished
    from .pool import PoolError, start

    # The workers warm their templates while nbgrader and the course's configuration load, if
    # anyone is to be graded: a rerun of a finished batch starts none (nor reaches a cluster).
    workers = max(1, args.workers)
    try:
        pool = (
            start(args.lesson, workers, isolation, args.dask)
            if args.force or unfinished(course, args.lesson)
            else None
        )
    except PoolError as problem:
        return _batch_output(args, [], problem)
    try:
        from .batch import BatchOptions, run_batch

        timeout = args.timeout
        if timeout is None:
            timeout = float(course_setting(course, "ExecutePreprocessor", "timeout", 30.0))
        secret = args.secret_problems
        if secret is None:
            secret = int(course_setting(course, "TrustedExecute", "secret_problems", 0))
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    options = BatchOptions(
        workers=workers,
        isolation=isolation,
        force=args.force,
        progress=not args.no_progress and not args.json,
        feedback=not args.no_feedback,
        log_level=args.log_level,
        dask=args.dask,
        student=args.student,
    )
    options.limits = Limits(
        timeout=timeout,
        budget=max(args.budget, timeout),
        memory_mb=args.memory,
        tmp_mb=args.tmp,
        cpu_seconds=max(120, int(args.budget)),
        cpus=args.cpus,
        secret_problems=max(0, secret),
        secret_seed=secrets.randbits(63) if secret > 0 else 0,  # this batch's, never the sandbox's
    )
    try:
        results = run_batch(course, args.lesson, options, pool)
    except (names.LessonProblem, PoolError) as problem:
        return _batch_output(args, [], problem)
    return _batch_output(args, results)


def _batch_output(args, results: list, problem: Exception | None = None) -> int:
    """The batch's results (``--csv``, ``--json`` or the table) and its exit status: the
    problem's when it could not grade (nothing matches the lesson: 1, as nbgrader; the lesson
    not released, the cluster out of reach: 2), else 1 if a student was refused or had an error.
    """
    if problem is not None:
        print(f"attn-grade batch: {problem}", file=sys.stderr)
    if args.csv or (results and not args.json):  # (nbgrader's import: not for an error alone)
        from .batch import summary_table, write_csv
    if args.csv:
        write_csv(results, args.csv)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2, ensure_ascii=False))
    elif results:
        print(summary_table(results))
    if problem is not None:
        return problem.status
    return 1 if any(r.status in ("error", "refused") for r in results) else 0


def _feedback(args) -> int:
    from . import class_feedback

    course = _course(args.course)
    if course is None:
        return 2
    status = 0
    try:
        results = class_feedback.write_feedback(
            course,
            args.lesson,
            workers=args.workers,
            force=args.force,
            progress=not args.no_progress and not args.json,
            log_level=args.log_level,
            student=args.student,
        )
    except names.LessonProblem as problem:  # nothing matches (1, as nbgrader), not released (2)
        print(f"attn-grade feedback: {problem}", file=sys.stderr)
        results, status = [], problem.status
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2, ensure_ascii=False))
    elif results:
        print(class_feedback.summary(results))
    return status or (1 if any(r.status in ("error", "refused") for r in results) else 0)


def _report(args) -> int:
    from . import report

    if bool(args.lesson) == bool(args.all):
        print("attn-grade report: name a lesson, or give --all", file=sys.stderr)
        return 2
    course = _course(args.course)
    if course is None:
        return 2
    try:
        after = report.STUCK_AFTER if args.stuck is None else max(1, args.stuck)
        course_id, reports = report.build(course, None if args.all else [args.lesson], after)
    except report.ReportError as error:
        print(f"attn-grade report: {error}", file=sys.stderr)
        return 2
    if not reports:
        print("attn-grade report: no lesson has submissions yet", file=sys.stderr)
        return 2
    written = []
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(report.html_page(course_id, reports), encoding="utf-8")
        written.append(args.html)
    if args.csv:
        written += report.write_csv(reports, args.csv)
    print(report.as_json(course_id, reports) if args.json else report.text_summary(reports))
    for path in written:  # apart from the report itself, which --json keeps parseable
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _dask_address(text: str) -> str:
    """``--dask``: a scheduler's address as given, ``local:N`` with N a whole number ≥ 1, or
    ``gateway:NAME`` with a name."""
    if text == "gateway:":
        raise argparse.ArgumentTypeError("gateway:NAME needs the name of a Dask Gateway cluster")
    if text.startswith("local:"):
        count = text.split(":", 1)[1]
        if not (count.isdigit() and int(count) >= 1):
            raise argparse.ArgumentTypeError(
                f"local:N needs a whole number of workers, 1 or more, not {count!r}"
            )
    return text


def _course(path: Path) -> Path | None:
    """``path`` resolved, when it looks like an nbgrader course folder; else None, said on stderr.

    Every command that opens the course's gradebook comes through here, so nbgrader's own
    SQLAlchemy warnings ("... not in session ...", about its gradebook's internals, nothing a
    user can act on) are silenced here once, and so are nbformat's, one for each cell id it
    mends (:func:`notebook_format.mend_cell_ids_quietly`).
    """
    import warnings

    from .notebook_format import mend_cell_ids_quietly

    warnings.filterwarnings("ignore", message=".*not in session.*")
    mend_cell_ids_quietly()
    course = path.resolve()
    if (course / "nbgrader_config.py").exists() or (course / "gradebook.db").exists():
        return course
    print(f"attn-grade: {course} does not look like an nbgrader course", file=sys.stderr)
    return None


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def course_setting(course: Path, section: str, name: str, default: float) -> float:
    """A number the course's ``nbgrader_config.py`` sets (``c.SECTION.NAME``), else
    ``default``."""
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        value = config[section][name]
    except Exception:  # noqa: BLE001 — no configuration, or one that fails: nbgrader's default
        return default
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


if __name__ == "__main__":
    sys.exit(main())
