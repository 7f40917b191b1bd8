"""``gradebook_engine.one_engine``: within a batch, a gradebook opened again costs a query.

nbgrader's ``Gradebook`` makes a new engine, checks every table and, on closing, disposes of its
connections, every time it is opened: about a dozen times per submission. Within the block the
first opening of a database is nbgrader's own; a later one reuses its engine and pooled
connection and checks only the course row. What nbgrader reads and writes must not change, and
after the block nbgrader's ``Gradebook`` must be exactly as it was."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from nbgrader import api
from nbgrader.api import Gradebook
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

from autograder.gradebook_engine import one_engine

COURSE = "attention"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A gradebook with a course, a lesson and a student, made by nbgrader."""
    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    with Gradebook(f"sqlite:///{path}", COURSE) as gb:
        gb.add_assignment("02-softmax-masking")
        gb.add_student("ada")
    return path


@pytest.fixture
def url(made: Path, tmp_path: Path) -> str:
    """A copy of that gradebook for one test, as its URL."""
    shutil.copy(made, tmp_path / "gradebook.db")
    return f"sqlite:///{tmp_path / 'gradebook.db'}"


class Seen:
    """The SQL statements run and the database connections made while in the block."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.connections = 0

    def __enter__(self) -> Seen:
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Pool, "connect", self._connect)
        return self

    def __exit__(self, *_) -> None:
        event.remove(Engine, "before_cursor_execute", self._statement)
        event.remove(Pool, "connect", self._connect)

    def _statement(self, conn, cursor, statement, *_) -> None:
        self.statements.append(" ".join(statement.split()))

    def _connect(self, *_) -> None:
        self.connections += 1

    def table_checks(self) -> list[str]:
        """The statements that look the tables up (nbgrader's ``inspect`` and ``create_all``)."""
        return [s for s in self.statements if "sqlite_master" in s or "PRAGMA" in s]


def open_and_read(url: str) -> tuple[object, list[str]]:
    """Open the gradebook at ``url``, read its students, close it: its engine and what it read."""
    with Gradebook(url, COURSE) as gb:
        return gb.engine, [s.id for s in gb.students]


def test_nbgraders_own_opening_makes_an_engine_checks_the_tables_and_connects_anew(url):
    """The cost the block removes (so the next test can tell it apart)."""
    with Seen() as seen:
        first, students = open_and_read(url)
        second, _ = open_and_read(url)
    assert students == ["ada"]
    assert first is not second
    assert seen.connections == 2
    assert len(seen.table_checks()) >= 2 * 10  # each opening looks up every one of its tables


def test_an_opening_again_reuses_the_engine_and_connection_and_checks_only_the_course(url):
    with one_engine():
        first, _ = open_and_read(url)  # nbgrader's own opening
        with Seen() as seen:
            again = [open_and_read(url) for _ in range(3)]
    assert all(engine is first for engine, _ in again)
    assert all(students == ["ada"] for _, students in again)
    assert seen.connections == 0
    assert seen.table_checks() == []
    course_checks = [s for s in seen.statements if "FROM course" in s]
    assert len(course_checks) == 3, seen.statements  # nbgrader's check of the course, each time


def test_a_gradebook_opened_again_is_nbgraders_gradebook_and_writes_what_nbgraders_writes(url):
    with Gradebook(url, COURSE) as theirs:
        attributes = set(vars(theirs))
    with one_engine():
        open_and_read(url)
        with Gradebook(url, COURSE) as gb:
            assert set(vars(gb)) == attributes
            assert gb.course_id == COURSE
            gb.add_student("grace", first_name="Grace")
        with Gradebook(url, "another-course") as gb:  # a course row made, as nbgrader makes it
            pass
    with Gradebook(url, COURSE) as gb:
        assert [s.id for s in gb.students] == ["ada", "grace"]
        assert gb.find_student("grace").first_name == "Grace"
    with sqlite3.connect(url[len("sqlite:///") :]) as db:
        courses = sorted(row[0] for row in db.execute("SELECT id FROM course"))
    assert courses == ["another-course", COURSE]


def test_a_new_gradebook_opened_in_the_block_is_made_by_nbgrader(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with one_engine():
        with Gradebook(url, COURSE) as gb:
            gb.add_student("ada")
        _, students = open_and_read(url)
    assert students == ["ada"]
    with sqlite3.connect(tmp_path / "new.db") as db:
        (version,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == api.get_alembic_version()


def test_after_the_block_nbgraders_gradebook_is_as_it_was_and_the_engine_is_disposed(url):
    nbgrader_open, nbgrader_close = Gradebook.__init__, Gradebook.close
    before = Gradebook(url, COURSE)  # opened before the block, closed in it: nbgrader's close
    pool_before = before.engine.pool
    with pytest.raises(RuntimeError, match="stop"), one_engine():
        assert Gradebook.__init__ is not nbgrader_open
        before.close()
        engine, _ = open_and_read(url)
        pool = engine.pool
        assert pool.checkedin() == 1  # the connection waits in the pool for the next opening
        raise RuntimeError("stop")
    assert before.engine.pool is not pool_before  # nbgrader's close disposed of its engine
    assert (Gradebook.__init__, Gradebook.close) == (nbgrader_open, nbgrader_close)
    assert engine.pool is not pool and pool.checkedin() == 0  # disposed at the end
    with Seen() as seen:
        after, _ = open_and_read(url)
    assert after is not engine and seen.connections == 1


def test_openings_from_two_threads_share_one_engine(url):
    engines, errors = [], []

    def open_many() -> None:
        try:
            for _ in range(10):
                engine, students = open_and_read(url)
                assert students == ["ada"]
                engines.append(engine)
        except Exception as error:  # noqa: BLE001 — reported by the assertion below
            errors.append(error)

    with one_engine():
        threads = [threading.Thread(target=open_many) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(engines) == 20 and len({id(e) for e in engines}) == 1
