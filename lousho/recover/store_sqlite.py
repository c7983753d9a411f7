"""The SQLite run store: one file in WAL mode, shared by several processes on one machine.

Concurrency: every write is one short ``BEGIN IMMEDIATE`` transaction (it takes the write lock at BEGIN, so two
writers queue on the busy timeout instead of deadlocking on a read-to-write upgrade); reads run in autocommit
and see the last commit (WAL readers never block the writer). Each store object holds one connection behind a
lock, so threads of one process may share it; each process opens its own.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lousho.recover import _rows as rows
from lousho.recover import schema
from lousho.recover._codec import decode, encode, format_utc, utc_now
from lousho.recover.errors import (
    ApprovalExists,
    ApprovalNotFound,
    CheckpointCorrupt,
    CheckpointNotFound,
    LeaseLost,
    RunAwaitingApproval,
    RunExists,
    RunNotFound,
    RunNotResumable,
    SchemaTooNew,
    SessionConflict,
    StoreBusy,
    StoreMissing,
)
from lousho.recover.store import (
    UPDATABLE,
    Approval,
    OutageState,
    RunRecord,
    Session,
    StepRecord,
    check_history_limit,
)

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

# Shared with the Postgres store: the column orders rows map by, and rows to records.
_RUN_COLUMNS = rows.RUN_COLUMNS
_STEP_COLUMNS = rows.STEP_COLUMNS
_APPROVAL_COLUMNS = rows.APPROVAL_COLUMNS
_SESSION_COLUMNS = rows.SESSION_COLUMNS
_TERMINAL = rows.TERMINAL
_check_choice = rows.check_choice
_column_value = rows.column_value

# The recover loop's claim rule, in SQL both backends run (_rows.py).
CLAIMABLE = rows.CLAIMABLE
DUE = rows.DUE
_OUTAGE_COLUMNS = (
    "failures, paused_since, probes, next_probe_at, probe_owner, probe_run, probe_expiry, last_error, updated_at"
)
_OUTAGE_ROW = f"SELECT {_OUTAGE_COLUMNS} FROM recover_outage WHERE id = 'provider'"
_CLOSED = OutageState(0, None, 0, None, None, None, None, None, "1970-01-01T00:00:00.000000Z")
_CLEAR_PAUSE = ("paused_since = NULL, probes = 0, next_probe_at = NULL, probe_owner = NULL, probe_run = NULL, "
                "probe_expiry = NULL")


class SqliteStore:
    """``RunStore`` on one SQLite file (see ``store.RunStore`` for the contract of each method)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "normal",
        history_limit: int = 50,
        create: bool = True,
        fault: Callable[[str], None] | None = None,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}")
        check_history_limit(history_limit)
        self.path = Path(path)
        self.location = str(self.path)
        self.history_limit = history_limit
        self._fault = fault
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        if not self.path.exists():
            if not create:
                raise StoreMissing(self.location)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False,
        )
        try:
            with self._translate():
                # WAL is a property of the file (the first opener sets it); synchronous and foreign keys are per
                # connection.
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
                self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # --- transactions ---

    def _busy(self, e: sqlite3.OperationalError) -> StoreBusy | None:
        """A lock held past the busy timeout is StoreBusy (retryable); other OperationalErrors stay as they are."""
        if getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreBusy(self.location, self._busy_timeout_s)
        return None

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as e:
            busy = self._busy(e)
            if busy is None:
                raise
            raise busy from e

    @contextmanager
    def _write(self, point: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; fault points ``<point>:before_commit`` and ``<point>:after_commit``."""
        conn = self._conn
        with self._lock, self._translate():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                self._hit(f"{point}:before_commit")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        self._hit(f"{point}:after_commit")

    def _hit(self, point: str) -> None:
        if self._fault is not None:
            self._fault(point)

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._translate():
            return self._conn.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        with self._lock, self._translate():
            self._conn.execute(schema.VERSION_TABLE)
            current = self._conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        if current > schema.LATEST:
            raise SchemaTooNew(self.location, current, schema.LATEST)
        if current == schema.LATEST:
            return
        with self._write("migrate") as conn:
            # Re-read under the write lock: another process may have migrated since.
            current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
            for version in range(current, schema.LATEST):
                for statement in schema.MIGRATIONS[version]:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                             (version + 1, utc_now()))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # --- rows to records ---

    def _run(self, row: tuple[Any, ...]) -> RunRecord:
        return rows.run_record(row, self.location)

    def _step(self, row: tuple[Any, ...]) -> StepRecord:
        return rows.step_record(row, self.location)

    def _approval(self, row: tuple[Any, ...]) -> Approval:
        return rows.approval_record(row, self.location)

    def _get(self, conn: sqlite3.Connection, run_id: str) -> RunRecord:
        row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id, self.location)
        return self._run(row)

    def _refused(self, conn: sqlite3.Connection, run_id: str, epoch: int | None) -> BaseException:
        """Why a fenced or conditional write on ``run_id`` changed no row (unfenced writes, ``epoch`` None, only
        change no row when the run is missing)."""
        row = conn.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return RunNotFound(run_id, self.location)
        return LeaseLost(run_id, -1 if epoch is None else epoch, row[0])

    # --- runs ---

    def create_run(
        self, run_id: str, *, agent: str, kind: str, input: Any, status: str = "running", attempts: int = 0,
    ) -> RunRecord:
        _check_choice("kind", kind, schema.RUN_KINDS)
        _check_choice("status", status, schema.RUN_STATUSES)
        text = encode(input, run_id=run_id)
        now = utc_now()
        with self._write("create_run") as conn:
            inserted = conn.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (run_id, agent, kind, status, text, attempts, now, now),
            ).rowcount
            if not inserted:
                raise RunExists(run_id, self.location)
            return self._get(conn, run_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return self._run(rows[0]) if rows else None

    def list_runs(self, statuses: Iterable[str] | None = None, agent: str | None = None) -> list[RunRecord]:
        where, params = ["1 = 1"], []
        if statuses is not None:
            wanted = list(statuses)
            where.append(f"status IN ({', '.join('?' * len(wanted))})" if wanted else "1 = 0")
            params += wanted
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [self._run(row) for row in self._read(sql, tuple(params))]

    def update_run(self, run_id: str, *, epoch: int | None = None, **fields: Any) -> RunRecord:
        unknown = sorted(set(fields) - UPDATABLE)
        if unknown:
            raise TypeError(f"update_run cannot set {', '.join(unknown)}; it sets {', '.join(sorted(UPDATABLE))}")
        columns = list(fields)
        values = [_column_value(run_id, name, fields[name]) for name in columns]
        sets = ", ".join(f"{name} = ?" for name in [*columns, "updated_at"])
        sql, params = f"UPDATE runs SET {sets} WHERE id = ?", [*values, utc_now(), run_id]
        if epoch is not None:
            sql, params = sql + " AND lease_epoch = ?", [*params, epoch]
        with self._write("update_run") as conn:
            if not conn.execute(sql, params).rowcount:
                raise self._refused(conn, run_id, epoch)
            return self._get(conn, run_id)

    def record_failure(
        self, run_id: str, error: dict[str, Any], *, status: str | None = None,
        next_attempt_at: datetime | None = None, count_attempt: bool = True, epoch: int | None = None,
    ) -> RunRecord:
        if status is not None:
            _check_choice("status", status, schema.RUN_STATUSES)
        stored = {"message": "", "code": None, "category": None, "retryable": True, **error}
        sql = (
            "UPDATE runs SET attempts = attempts + ?, consecutive_failures = consecutive_failures + 1, "
            "last_error = ?, status = COALESCE(?, status), next_attempt_at = COALESCE(?, next_attempt_at), "
            "updated_at = ? WHERE id = ?"
        )
        params = [int(count_attempt), encode(stored, run_id=run_id), status,
                  _column_value(run_id, "next_attempt_at", next_attempt_at), utc_now(), run_id]
        if epoch is not None:
            sql, params = sql + " AND lease_epoch = ?", [*params, epoch]
        with self._write("record_failure") as conn:
            if not conn.execute(sql, params).rowcount:
                raise self._refused(conn, run_id, epoch)
            return self._get(conn, run_id)

    def begin_attempt(self, run_id: str, *, epoch: int | None = None) -> RunRecord:
        # A takeover (no epoch) also drops the old lease: its holder is fenced out, and an expired lease left
        # behind would make the run claimable by a recover loop at once.
        takeover = "" if epoch is not None else "lease_owner = NULL, lease_expiry = NULL, "
        sql = (
            f"UPDATE runs SET attempts = attempts + 1, status = 'running', lease_epoch = lease_epoch + ?, {takeover}"
            "updated_at = ? WHERE id = ? AND status NOT IN ('finished', 'stopped') AND NOT ("
            "status = 'awaiting_approval' AND EXISTS ("
            "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending'))"
        )
        params: list[Any] = [0 if epoch is not None else 1, utc_now(), run_id]
        if epoch is not None:
            sql, params = sql + " AND lease_epoch = ?", [*params, epoch]
        with self._write("begin_attempt") as conn:
            if conn.execute(sql, params).rowcount:
                return self._get(conn, run_id)
            run = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if run is not None and run[0] in _TERMINAL:
                raise RunNotResumable(run_id, run[0])
            pending = [r[0] for r in conn.execute(
                "SELECT id FROM approvals WHERE run_id = ? AND status = 'pending' ORDER BY created_at, id",
                (run_id,))]
            if run is not None and run[0] == "awaiting_approval" and pending:
                raise RunAwaitingApproval(run_id, pending)
            raise self._refused(conn, run_id, epoch)

    def bump_epoch(self, run_id: str, expected: int | None = None) -> int:
        with self._write("bump_epoch") as conn:
            row = conn.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(run_id, self.location)
            base = row[0] if expected is None else expected
            changed = conn.execute(
                "UPDATE runs SET lease_epoch = ?, updated_at = ? WHERE id = ? AND lease_epoch = ?",
                (base + 1, utc_now(), run_id, base),
            ).rowcount
            if not changed:
                raise LeaseLost(run_id, base, row[0])
            return base + 1

    def delete_run(self, run_id: str) -> bool:
        with self._write("delete_run") as conn:
            for table in ("checkpoints", "approvals"):  # the history is a view of checkpoints
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            return bool(conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount)

    # --- steps ---

    def save_step(self, run_id: str, step: int, name: str, output: Any, epoch: int) -> StepRecord:
        text = encode(output, run_id=run_id, step=step)
        now = utc_now()
        with self._write("save_step") as conn:
            # The fence is the insert itself: one conditional write that records the step only while the run is
            # at ``epoch`` (BEGIN IMMEDIATE already serialises it against bump_epoch). It reads the runs row
            # without rewriting it, so a step commits one page fewer than a fence-by-UPDATE would. The Postgres store
            # adds FOR SHARE to the SELECT so that a concurrent bump_epoch waits for, or fences, this insert.
            inserted = conn.execute(rows.SAVE_STEP, (run_id, step, name, text, now, epoch, self.history_limit,
                                                     run_id, epoch)).rowcount
            if not inserted:
                existing = conn.execute(f"SELECT {_STEP_COLUMNS} FROM checkpoints WHERE run_id = ? AND step = ?",
                                        (run_id, step)).fetchone()
                current = conn.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
                if current is None or current[0] != epoch:
                    raise self._refused(conn, run_id, epoch)
                return self._step(existing)  # recorded already: the first record stands
            # Progress resets the failure count; the WHERE skips the page write when it is 0 already.
            conn.execute(rows.RESET_FAILURES, (now, run_id))
        return StepRecord(run_id, step, name, decode(text, run_id=run_id, step=step, column="output",
                                                       location=self.location), now, epoch)

    def load_steps(self, run_id: str) -> dict[int, StepRecord]:
        rows = self._read(f"SELECT {_STEP_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY step", (run_id,))
        return {row[1]: self._step(row) for row in rows}

    def history(self, run_id: str, limit: int = 50) -> list[StepRecord]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        # min(): after the limit was lowered, slots past it still hold older entries until the run is deleted.
        rows = self._read(
            f"SELECT {_STEP_COLUMNS} FROM checkpoint_history WHERE run_id = ? ORDER BY seq DESC LIMIT ?",
            (run_id, min(limit, self.history_limit)),
        )
        return [self._step(row) for row in rows]

    def fork(self, run_id: str, from_step: int, new_id: str, note: str | None = None) -> RunRecord:
        now = utc_now()
        with self._write("fork") as conn:
            self._get(conn, run_id)  # RunNotFound first
            kept = [r[0] for r in conn.execute("SELECT step FROM checkpoints WHERE run_id = ? ORDER BY step",
                                               (run_id,))]
            if from_step not in kept and from_step != (kept[-1] + 1 if kept else 0):
                raise CheckpointNotFound(run_id, from_step, kept)
            inserted = conn.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, consecutive_failures, lease_epoch, "
                "healed_from, note, created_at, updated_at) "
                "SELECT ?, agent, kind, 'interrupted', input, 0, 0, 0, id, ?, ?, ? FROM runs WHERE id = ? "
                "ON CONFLICT (id) DO NOTHING",
                (new_id, note, now, now, run_id),
            ).rowcount
            if not inserted:
                raise RunExists(new_id, self.location)
            copied = conn.execute(
                "SELECT step, name, output, saved_at, epoch FROM checkpoints WHERE run_id = ? AND step < ? "
                "ORDER BY step", (run_id, from_step),
            ).fetchall()
            # The copies are the fork's first saves, so its history starts with them.
            conn.executemany(rows.COPY_STEP, [(new_id, *row, self.history_limit) for row in copied])
            return self._get(conn, new_id)

    # --- the recover loop: claims and the outage breaker ---

    def list_due(self, *, now: datetime, orphan_before: datetime, limit: int = 1000) -> list[str]:
        at = format_utc(now)
        rows = self._read(f"SELECT id FROM runs WHERE {CLAIMABLE} AND {DUE} ORDER BY created_at, id LIMIT ?",
                          (at, format_utc(orphan_before), at, limit))
        return [row[0] for row in rows]

    def claim_run(
        self, run_id: str, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime,
        due_only: bool = True,
    ) -> RunRecord | None:
        at = format_utc(now)
        sql = ("UPDATE runs SET lease_owner = ?, lease_expiry = ?, lease_epoch = lease_epoch + 1, updated_at = ? "
               f"WHERE id = ? AND {CLAIMABLE}")
        params = [owner, format_utc(now + timedelta(seconds=lease_seconds)), at, run_id, at,
                  format_utc(orphan_before)]
        if due_only:
            sql, params = f"{sql} AND {DUE}", [*params, at]
        # BEGIN IMMEDIATE serialises this against every other writer, so the WHERE is checked and the row changed
        # with nothing in between: of two claimers one changes the row, the other finds the lease held.
        with self._write("claim_run") as conn:
            if not conn.execute(sql, params).rowcount:
                return None
            return self._get(conn, run_id)  # a run that does not decode rolls the claim back

    def claim_due(
        self, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime, limit: int,
    ) -> list[RunRecord | CheckpointCorrupt]:
        at, expiry = format_utc(now), format_utc(now + timedelta(seconds=lease_seconds))
        # BEGIN IMMEDIATE holds every other writer off from the read to the write: one compare-and-set for the batch.
        with self._write("claim_due") as conn:
            found = conn.execute(rows.CLAIM_DUE_SELECT, (at, format_utc(orphan_before), at, limit)).fetchall()
            if found:
                ids = [row[0] for row in found]
                conn.execute(f"{rows.CLAIM}id IN ({', '.join('?' * len(ids))})", (owner, expiry, at, *ids))
        return [rows.claimed(row, owner, expiry, at, self.location) for row in found]

    def _outage(self, row: tuple[Any, ...]) -> OutageState:
        error = decode(row[7], run_id="provider", step=None, column="last_error", location=self.location,
                       owner="outage breaker")
        return OutageState(row[0], row[1], row[2], row[3], row[4], row[5], row[6], error, row[8])

    def get_outage(self) -> OutageState:
        rows = self._read(_OUTAGE_ROW)
        return self._outage(rows[0]) if rows else _CLOSED

    def record_outcome(
        self, *, provider_failure: bool, now: datetime, threshold: int, first_probe_at: datetime,
        error: dict[str, Any] | None = None,
    ) -> tuple[OutageState, str | None]:
        at = format_utc(now)
        if not provider_failure:
            # The common case, a success with the breaker closed and no failures counted, needs no write: a
            # replica's failure that lands after this read is simply ordered after this success.
            current = self.get_outage()
            if not current.paused and current.failures == 0:
                return current, None
        with self._write("record_outcome") as conn:
            conn.execute("INSERT INTO recover_outage (id, failures, probes, updated_at) VALUES ('provider', 0, 0, ?) "
                         "ON CONFLICT (id) DO NOTHING", (at,))  # a row deleted by hand comes back closed
            before = self._outage(conn.execute(_OUTAGE_ROW).fetchone())
            change: str | None = None
            if provider_failure and not before.paused and before.failures + 1 >= threshold:
                conn.execute(  # each column once: Postgres refuses a second assignment to one column
                    "UPDATE recover_outage SET failures = failures + 1, paused_since = ?, probes = 0, "
                    "next_probe_at = ?, probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, last_error = ?, "
                    "updated_at = ? "
                    "WHERE id = 'provider'",
                    (at, format_utc(first_probe_at), None if error is None else encode(error, run_id="provider"), at),
                )
                change = "opened"
            elif provider_failure:
                conn.execute("UPDATE recover_outage SET failures = failures + 1, updated_at = ? WHERE id = 'provider'",
                             (at,))
            elif before.failures or before.paused:
                conn.execute(f"UPDATE recover_outage SET failures = 0, {_CLEAR_PAUSE}, last_error = NULL, "
                             "updated_at = ? WHERE id = 'provider'", (at,))
                change = "closed" if before.paused else None
            else:
                return before, None  # closed with no failures: nothing to write
            return self._outage(conn.execute(_OUTAGE_ROW).fetchone()), change

    def reserve_probe(self, *, owner: str, now: datetime, expiry: datetime) -> bool:
        at = format_utc(now)
        with self._write("reserve_probe") as conn:
            return bool(conn.execute(
                "UPDATE recover_outage SET probe_owner = ?, probe_run = NULL, probe_expiry = ?, updated_at = ? "
                "WHERE id = 'provider' AND paused_since IS NOT NULL AND (next_probe_at IS NULL OR next_probe_at <= ?) "
                "AND (probe_owner IS NULL OR probe_expiry <= ?)",
                (owner, format_utc(expiry), at, at, at),
            ).rowcount)

    def renew_probe(self, *, owner: str, expiry: datetime, run_id: str | None = None) -> bool:
        with self._write("renew_probe") as conn:
            return bool(conn.execute(
                "UPDATE recover_outage SET probe_expiry = ?, probe_run = COALESCE(?, probe_run) "
                "WHERE id = 'provider' AND probe_owner = ?",
                (format_utc(expiry), run_id, owner),
            ).rowcount)

    def release_probe(self, *, owner: str, now: datetime, failed: bool, next_probe_at: datetime | None) -> bool:
        sets, params = "probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, updated_at = ?", [format_utc(now)]
        if failed:
            sets += ", probes = probes + 1, next_probe_at = COALESCE(?, next_probe_at)"
            params.append(None if next_probe_at is None else format_utc(next_probe_at))
        with self._write("release_probe") as conn:
            return bool(conn.execute(f"UPDATE recover_outage SET {sets} WHERE id = 'provider' AND probe_owner = ?",
                                     (*params, owner)).rowcount)

    # --- approvals ---

    def create_approval(
        self, run_id: str, *, tool_call_id: str | None, tool_name: str | None, args: Any, kind: str = "tool",
        approval_id: str | None = None, pause_epoch: int | None = None,
    ) -> Approval:
        _check_choice("kind", kind, schema.APPROVAL_KINDS)
        approval_id = approval_id or uuid.uuid4().hex
        text = encode(args, run_id=run_id)
        now = utc_now()
        with self._write("create_approval") as conn:
            if pause_epoch is not None:
                paused = conn.execute(
                    "UPDATE runs SET status = 'awaiting_approval', updated_at = ? WHERE id = ? AND lease_epoch = ?",
                    (now, run_id, pause_epoch),
                ).rowcount
                if not paused:
                    raise self._refused(conn, run_id, pause_epoch)
            else:
                self._get(conn, run_id)
            inserted = conn.execute(
                f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, NULL) "
                "ON CONFLICT (id) DO NOTHING",
                (approval_id, run_id, tool_call_id, tool_name, text, kind, now),
            ).rowcount
            if not inserted:
                raise ApprovalExists(approval_id, self.location)
            return self._approval(conn.execute(f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE id = ?",
                                               (approval_id,)).fetchone())

    def get_approval(self, approval_id: str) -> Approval | None:
        rows = self._read(f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE id = ?", (approval_id,))
        return self._approval(rows[0]) if rows else None

    def list_approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, params = ["1 = 1"], []
        for column, value in (("run_id", run_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [self._approval(row) for row in self._read(sql, tuple(params))]

    def resolve_approval(self, approval_id: str, approved: bool) -> Approval:
        with self._write("resolve_approval") as conn:
            taken = conn.execute(
                "UPDATE approvals SET status = ?, resolved_at = ? WHERE id = ? AND status = 'pending'",
                ("approved" if approved else "denied", utc_now(), approval_id),
            ).rowcount
            if not taken:
                raise ApprovalNotFound(approval_id, self.location)
            return self._approval(conn.execute(f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE id = ?",
                                               (approval_id,)).fetchone())

    # --- sessions ---

    def get_session(self, session_id: str) -> Session | None:
        rows = self._read(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            return None
        row = rows[0]
        transcript = decode(row[2], run_id=row[0], step=None, column="transcript", location=self.location,
                            owner="session")
        return Session(row[0], row[1], transcript, row[3], row[4], row[5], row[6])

    def save_session(self, session: Session) -> Session:
        text = encode(session.transcript, run_id=session.id)
        now = utc_now()
        with self._write("save_session") as conn:
            if session.version == 0:
                written = conn.execute(
                    f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, 1, ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (session.id, session.agent, text, session.turns, session.pending_turn, now),
                ).rowcount
            else:
                written = conn.execute(
                    "UPDATE sessions SET agent = ?, transcript = ?, turns = ?, pending_turn = ?, "
                    "version = version + 1, updated_at = ? WHERE id = ? AND version = ?",
                    (session.agent, text, session.turns, session.pending_turn, now, session.id, session.version),
                ).rowcount
            if not written:
                raise SessionConflict(session.id, session.version, self.location)
        return Session(session.id, session.agent, decode(text, run_id=session.id, step=None, column="transcript",
                                                         location=self.location, owner="session"),
                       session.turns, session.pending_turn, session.version + 1, now)
