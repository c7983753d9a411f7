"""The Postgres run store: one database (or one schema of it) shared by processes on several machines.

The same tables as the SQLite store, from the same migrations (``schema.py``), and every ``RunStore`` method from
the same base (``store_sql.SqlRunStore``, whose docstring says why one text of SQL is safe on both); tests/recover
runs one suite against both. What is Postgres's own lives here: row locks (``_for``: READ COMMITTED runs
transactions at once, so a row lock is what orders two writers of one run), ``?`` handed to psycopg as ``%s``,
single idempotent statements run as their own transaction, migrations under an advisory lock, and bytewise
collation.

Columns: every TEXT column is declared ``COLLATE "C"`` here (``_pg_ddl``), so ids and timestamps sort and compare
bytewise as in SQLite, whatever the database's default collation (``en_US.UTF-8`` would sort ``r1.heal`` against
``r1-x`` differently, and ``ORDER BY created_at, id`` with it).

Concurrency inside a process: one connection per store object behind a lock; each process opens its own.
Connection, retries and error translation live in ``_pg.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg

from lousho.recover import schema
from lousho.recover._codec import utc_now
from lousho.recover._pg import PgConnection, redact
from lousho.recover.errors import SchemaTooNew, StoreMissing
from lousho.recover.store_protocol import DEFAULT_HISTORY_LIMIT
from lousho.recover.store_sql import Cursor, SqlRunStore

T = TypeVar("T")

# As the SQLite store's busy timeout: a lock held longer than this (a stuck or leaked transaction) is StoreBusy.
BUSY_TIMEOUT_S = 10.0
# pg_advisory_xact_lock key for migrations (any constant; "lousho" in ASCII): two processes opening a new database
# at once would otherwise race CREATE TABLE (Postgres has no database-wide write lock like SQLite's).
_MIGRATION_LOCK = 0x6C6F7573686F


def _pg_ddl(statement: str) -> str:
    """A migration statement as Postgres runs it: TEXT columns collate bytewise, as in SQLite (module docstring)."""
    return re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', statement)


@functools.lru_cache(maxsize=512)  # the base's statements are a few dozen texts, rebuilt per call
def _pyformat(sql: str) -> str:
    """``sql`` with psycopg's placeholders (the base's statements hold no literal ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class _QmarkCursor:
    """A psycopg cursor that takes the base's ``?`` placeholders."""

    __slots__ = ("_cur",)

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Sequence[Any] | None = None, /) -> psycopg.Cursor[Any]:
        return self._cur.execute(_pyformat(sql), params)

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> None:
        self._cur.executemany(_pyformat(sql), params)


class PostgresStore(SqlRunStore):
    """``RunStore`` on a Postgres database (see ``store_protocol.RunStore`` for the contract of each method)."""

    def __init__(
        self,
        url: str,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        create: bool = True,
        fault: Callable[[str], None] | None = None,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        super().__init__(redact(url), history_limit=history_limit, fault=fault)
        self._db = PgConnection(url, self.location, busy_timeout_s)
        try:
            self._migrate(create)
        except BaseException:
            self._db.close()
            raise

    # --- dialect hooks ---

    def _write(self, point: str, body: Callable[[Cursor], T]) -> T:
        """``body`` as one transaction (re-run whole on a transient error: ``_pg.py``)."""
        with self._lock:
            result = self._db.run(lambda cur: body(_QmarkCursor(cur)), write=True,
                                  before_commit=lambda: self._hit(f"{point}:before_commit"))
        self._hit(f"{point}:after_commit")
        return result

    def _write_one(self, point: str, body: Callable[[Cursor], T]) -> T:
        """One statement that sets values, as its own transaction: one round trip (not a BEGIN, the statement and a
        COMMIT), retried whole on a lost connection as a read is. Its fault point ``<point>:before_commit`` comes
        just before it (a single statement has no moment between its write and its commit)."""
        with self._lock:
            self._hit(f"{point}:before_commit")
            result = self._db.run(lambda cur: body(_QmarkCursor(cur)), write=False)
        self._hit(f"{point}:after_commit")
        return result

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._db.run(lambda cur: cur.execute(_pyformat(sql), params).fetchall(), write=False)

    def _for(self, mode: str) -> str:
        return f" FOR {mode}"

    def _migrate(self, create: bool) -> None:
        def migrate(cur: Cursor) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            if cur.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
                if not create:
                    raise StoreMissing(self.location)
                cur.execute(_pg_ddl(schema.VERSION_TABLE))
            current = cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
            if current > schema.LATEST:
                raise SchemaTooNew(self.location, current, schema.LATEST)
            for version in range(current, schema.LATEST):
                for statement in schema.MIGRATIONS[version]:
                    cur.execute(_pg_ddl(statement))
                cur.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                            (version + 1, utc_now()))

        self._write("migrate", migrate)

    def close(self) -> None:
        with self._lock:
            self._db.close()
