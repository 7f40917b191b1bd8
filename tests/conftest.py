"""Shared test set-up."""

import os
import tempfile

import pytest


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


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium for the browser tests, installed once if missing; skip without it."""
    from browser import ensure_chromium

    path, why = ensure_chromium()
    if path is None:
        pytest.skip(f"no Chromium for the browser test: {why}")
    return path
