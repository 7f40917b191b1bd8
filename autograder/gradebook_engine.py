"""nbgrader's gradebook, opened once per database for a whole batch.

nbgrader opens its ``Gradebook`` about a dozen times per submission (the ``Autograde`` converter
five times, then ``SaveAutoGrades``, ``AssignLatePenalties``, ``OverwriteCells``, the batch's own
reads), and each opening costs as much as the work it opens for:

* a new SQLAlchemy engine, whose cache of compiled statements dies with it;
* a check of every table (``inspect`` and ``create_all``: a query per table);
* on closing, ``engine.dispose()``: the next opening connects afresh, and SQLite reads the
  database's schema again on a new connection's first statement.

Within :func:`one_engine`, the first opening of a database is nbgrader's own (it makes the tables
of a new gradebook, or finds them). Every later opening of the same URL gets that engine and its
pooled connections, and checks the course row as nbgrader's does, but not the tables again; closing
one returns its connections to the pool. The engines are disposed when the block ends, and
nbgrader's ``Gradebook`` is as it was. nbgrader's queries, sessions and transactions are unchanged:
each opening still has a session of its own, and a connection of its own while it is in use.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def one_engine() -> Iterator[None]:
    """While in this block, every ``nbgrader.api.Gradebook`` of a URL opened before in it reuses
    that opening's engine and skips nbgrader's check of the tables (see the module doc)."""
    from nbgrader import api
    from sqlalchemy.orm import scoped_session, sessionmaker

    engines: dict[str, object] = {}  # URL → the engine its first opening made
    shared: set[object] = set()  # those engines (a lookup that never iterates over the dict)
    lock = threading.Lock()
    nbgrader_open, nbgrader_close = api.Gradebook.__init__, api.Gradebook.close

    def open_(gb, db_url: str, course_id: str = "default_course", authenticator=None) -> None:
        with lock:
            engine = engines.get(str(db_url))
            if engine is None:  # the first opening: nbgrader's own, tables made or found
                nbgrader_open(gb, db_url, course_id, authenticator)
                engines[str(db_url)] = gb.engine
                shared.add(gb.engine)
                return
        # as nbgrader's Gradebook.__init__ does, less the engine and the check of the tables
        gb.engine = engine
        gb.db = scoped_session(sessionmaker(autoflush=True, bind=engine, future=True))
        gb.check_course(course_id=course_id)
        gb.course_id = course_id
        gb.authenticator = authenticator

    def close(gb) -> None:
        if gb.engine not in shared:  # opened before the block: nbgrader's close
            nbgrader_close(gb)
            return
        gb.db.remove()  # its connection goes back to the pool; the block's end disposes it

    api.Gradebook.__init__, api.Gradebook.close = open_, close
    try:
        yield
    finally:
        api.Gradebook.__init__, api.Gradebook.close = nbgrader_open, nbgrader_close
        for engine in engines.values():
            engine.dispose()
