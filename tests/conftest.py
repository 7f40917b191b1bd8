"""Shared test set-up."""

import os
import tempfile

import pytest

EXPECT_MS = 30_000

# `make test` runs the suite's files side by side (pytest-xdist, ``--dist loadfile``: each file
# whole in one worker, so its module fixtures are set up once), in the order collected. Every file
# that takes over 20 s is here, longest first (each test's wall time summed per file, two workers
# on two cores, 2026-12-01: 943, 767, 766, 468, 453 … 21 s), so each worker
# takes the longest file left when it is free and none is left running a long one alone at the
# end. A file missing here starts after these; the order of the tests inside a file is kept.
LONGEST_FIRST = (
    "test_one_verdict.py",
    "test_grade_batch.py",
    "test_grade_hostile.py",
    "test_grade_dask.py",
    "test_autograde.py",
    "test_browser.py",
    "test_collect_hostile.py",
    "test_grade_check.py",
    "test_memorised_problems.py",
    "test_grade_cpu.py",
    "test_memorised_modules.py",
    "test_grade_postgres.py",
    "test_grade_report.py",
    "test_grade_resume.py",
    "test_torch_build_and_train.py",
    "test_sandbox.py",
    "test_z2jh_exchange.py",
    "test_torch_gpt.py",
    "test_viz.py",
    "test_pytest_plugin.py",
    "test_formgrader_pages.py",
    "test_grade_names.py",
    "test_shared_template.py",
    "test_numpy_chunked_perf.py",
    "test_hub.py",
    "test_viz_inside.py",
    "test_grade_concurrent.py",
    "test_checks_feedback.py",
    "test_browser_lesson06.py",
    "test_checks_search.py",
    "test_grade_batch_memory.py",
    "test_lab.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


@pytest.fixture(autouse=True, scope="session")
def _private_course_home(tmp_path_factory):
    """Mastery records written during tests (by notebooks, quizzes, subprocesses) stay private."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_COURSE_HOME", str(tmp_path_factory.mktemp("course-home")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def _private_temp_dir(tmp_path_factory):
    """The suite, and every program it starts, uses a temp dir of its own; the grader's
    programs leave nothing of theirs behind in it."""
    tmp = tmp_path_factory.mktemp("tmp")
    mp = pytest.MonkeyPatch()
    mp.setenv("TMPDIR", str(tmp))
    mp.setattr(tempfile, "tempdir", str(tmp))
    yield
    mp.undo()
    left = sorted(name for name in os.listdir(tmp) if name.startswith("attn-grade"))
    assert not left, f"left behind in the temp dir: {left}"


@pytest.fixture(autouse=True, scope="session")
def _releases_made_once(tmp_path_factory):
    """Courses the tests release with nbgrader share one release of each set of lessons per run:
    in the folder all of pytest-xdist's workers share, or this process's own without them."""
    import course

    base = tmp_path_factory.getbasetemp()
    course.RELEASES = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "releases"
    yield
    course.RELEASES = None


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium for the browser tests, installed once if missing; skip without it."""
    from browser import ensure_chromium

    path, why = ensure_chromium()
    if path is None:
        pytest.skip(f"no Chromium for the browser test: {why}")
    from playwright.sync_api import expect

    # Playwright's assertions wait 5 s by default. The suite runs test files side by side
    # (pytest-xdist), so a page may take longer to show what it will show: wait as long as the
    # browser tests wait for anything else.
    expect.set_options(timeout=EXPECT_MS)
    return path
