"""Shared test set-up."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_course_home(tmp_path_factory):
    """Mastery records written during tests (by notebooks, quizzes, subprocesses) stay private."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_COURSE_HOME", str(tmp_path_factory.mktemp("course-home")))
    yield
    mp.undo()
