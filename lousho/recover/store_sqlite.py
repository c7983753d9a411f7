"""The SQLite run store: one file in WAL mode, shared by several processes on one machine.

Concurrency: every write is one short ``BEGIN IMMEDIATE`` transaction (it takes the write lock at BEGIN, so two
writers queue on the busy timeout instead of deadlocking on a read-to-write upgrade, and no row lock is needed:
``_for`` stays empty); reads run in autocommit and see the last commit (WAL readers never block the writer). Each
store object holds one connection behind a lock, so threads of one process may share it; each process opens its
own. Every ``RunStore`` method is ``store_sql.SqlRunStore``'s; this module connects, migrates and translates a
lock held too long into ``StoreBusy``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from lousho.recover import schema
from lousho.recover._codec import utc_now
from lousho.recover.errors import SchemaTooNew, StoreBusy, StoreFailed, StoreMissing, StoreNotRunStore
from lousho.recover.store_protocol import DEFAULT_HISTORY_LIMIT
from lousho.recover.store_sql import Cursor, SqlRunStore

T = TypeVar("T")

# A write transaction here is a handful of statements (~0.1 ms), so a writer waits for the lock only while others
# commit: 10 s covers a long queue of processes, and a stuck writer still surfaces as StoreBusy, not a hang.
BUSY_TIMEOUT_S = 10.0

# synchronous: NORMAL by default (FULL with ``?synchronous=full``). In WAL mode NORMAL writes every commit to the
# WAL file before COMMIT returns but fsyncs only at WAL checkpoints, so a committed checkpoint survives a SIGKILL
# of the process (the bytes are in the OS page cache; tests/recover/test_checkpoint_crash.py kills right after the
# commit and finds the step) and the database never corrupts. Only a power loss or OS crash can drop the newest
# commits, and then their steps re-run: the at-least-once contract every step already has. FULL adds an fsync per
# commit. Measured with benchmarks/perf/checkpoints.py (ext4, 2 shared vCPUs, docs/performance.md): NORMAL 12,000 to
# 27,000 durable writes/s and 0.12 to 0.17 ms per step of a 20-step run (about 10% on 1 ms steps); FULL 600 to 6,700
# writes/s, as the disk's fsync latency varies, and 0.5 to 3 ms per step, for a guarantee beyond the one asked of
# the store.
SYNCHRONOUS = ("normal", "full")


class SqliteStore(SqlRunStore):
    """``RunStore`` on one SQLite file (see ``store_protocol.RunStore`` for the contract of each method)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "normal",
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        create: bool = True,
        fault: Callable[[str], None] | None = None,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}")
        self.path = Path(path)
        super().__init__(str(self.path), history_limit=history_limit, fault=fault)
        self._busy_timeout_s = busy_timeout_s
        if not self.path.exists():
            if not create:
                raise StoreMissing(self.location)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.is_file() and self.path.stat().st_size > 0
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False,
        )
        try:
            with self._translate():
                if existing:
                    self._refuse_another_programs_file()
                # WAL is a property of the file (the first opener sets it); synchronous and foreign keys are per
                # connection.
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
                self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def _refuse_another_programs_file(self) -> None:
        """Before anything is written to an existing file (WAL mode, the tables): refuse one that is not SQLite,
        or whose tables are another program's, rather than add ours to it (a listing command did)."""
        try:
            tables = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise StoreNotRunStore(self.location, str(e)) from None
        if tables and "schema_migrations" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreNotRunStore(self.location, f"its tables are another program's ({shown})")

    # --- transactions ---

    @contextmanager
    def _translate(self) -> Iterator[None]:
        """A lock held past the busy timeout is StoreBusy (retryable); any other error of the database (a corrupt
        file, a full disk, a read-only file) is StoreFailed, a coded error rather than a traceback."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise StoreBusy(self.location, self._busy_timeout_s) from e
            raise StoreFailed(self.location, str(e) or type(e).__name__) from e

    def _write(self, point: str, body: Callable[[Cursor], T]) -> T:
        conn = self._conn
        with self._lock, self._translate():
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                self._hit(f"{point}:before_commit")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        self._hit(f"{point}:after_commit")
        return result

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock, self._translate():
            return self._conn.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        with self._lock, self._translate():
            self._conn.execute(schema.VERSION_TABLE)
            current = self._conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        if current > schema.LATEST:
            raise SchemaTooNew(self.location, current, schema.LATEST)
        if current < schema.LATEST:
            self._write("migrate", self._apply_migrations)

    @staticmethod
    def _apply_migrations(conn: Cursor) -> None:
        # Re-read under the write lock: another process may have migrated since.
        current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        for version in range(current, schema.LATEST):
            for statement in schema.MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", (version + 1, utc_now()))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
