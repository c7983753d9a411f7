"""The Postgres store's methods for the recover loop: run claims and the shared provider-outage breaker.

Same contracts as ``store.RunStore`` (and the SQLite store, whose claim rule ``CLAIMABLE``/``DUE`` is reused here,
so the rule lives in one place). Why each is safe under READ COMMITTED:

- ``claim_run``, ``reserve_probe``, ``renew_probe``, ``release_probe`` are one conditional UPDATE whose WHERE
  reads only the row it changes. A second racer waits on the first's row lock, then re-checks the WHERE against
  the committed row (EvalPlanQual) and finds the lease or the slot taken: exactly one wins (STYLE §9).
- ``record_outcome`` reads the breaker and then decides what to write, so it locks the row first
  (``SELECT ... FOR UPDATE``): two replicas counting the failure that reaches the threshold open it once, and
  only one of them reports ``"opened"``. (The ``INSERT ... ON CONFLICT DO NOTHING`` before it happens to wait
  for a concurrent writer of the row too, as unique checks do, so the race test passes without the lock; the
  lock is what states the rule.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg

from lousho.recover import _rows as rows
from lousho.recover._codec import decode, encode, format_utc
from lousho.recover._rows import CLAIMABLE, DUE, pg
from lousho.recover.errors import CheckpointCorrupt
from lousho.recover.store import OutageState, RunRecord

T = TypeVar("T")
Cursor = psycopg.Cursor[Any]

_CLAIMABLE = pg(CLAIMABLE)  # parameters: now, orphan_before
_DUE = pg(DUE)  # parameter: now
# SKIP LOCKED: rows another replica is claiming this instant are passed over, not waited for; the rows locked are
# re-read current, so the claim rule holds for the versions the UPDATE changes.
_CLAIM_DUE_SELECT = pg(rows.CLAIM_DUE_SELECT) + " FOR UPDATE SKIP LOCKED"
_CLAIM_IDS = pg(rows.CLAIM) + "id = ANY(%s)"
_OUTAGE_COLUMNS = (
    "failures, paused_since, probes, next_probe_at, probe_owner, probe_run, probe_expiry, last_error, updated_at"
)
_OUTAGE_ROW = f"SELECT {_OUTAGE_COLUMNS} FROM recover_outage WHERE id = 'provider'"
_CLOSED = OutageState(0, None, 0, None, None, None, None, None, "1970-01-01T00:00:00.000000Z")
_CLEAR_PAUSE = ("paused_since = NULL, probes = 0, next_probe_at = NULL, probe_owner = NULL, probe_run = NULL, "
                "probe_expiry = NULL")


class PgLoopMethods:
    """Mixed into ``PostgresStore``, which provides the transaction helpers declared here."""

    location: str
    _read: Callable[..., list[tuple[Any, ...]]]
    _write: Callable[[str, Callable[[Cursor], Any]], Any]
    _get: Callable[..., RunRecord]

    # --- claims ---

    def list_due(self, *, now: datetime, orphan_before: datetime, limit: int = 1000) -> list[str]:
        at = format_utc(now)
        rows = self._read(f"SELECT id FROM runs WHERE {_CLAIMABLE} AND {_DUE} ORDER BY created_at, id LIMIT %s",
                          (at, format_utc(orphan_before), at, limit))
        return [row[0] for row in rows]

    def claim_run(
        self, run_id: str, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime,
        due_only: bool = True,
    ) -> RunRecord | None:
        at = format_utc(now)
        # FOR UPDATE SKIP LOCKED: a replica whose run another replica is claiming this instant moves on
        # at once instead of queueing on the row lock; the locked row is re-read current, so the
        # conditions hold for the version updated.
        where = f"id = %s AND {_CLAIMABLE}"
        params = [owner, format_utc(now + timedelta(seconds=lease_seconds)), at, run_id, at,
                  format_utc(orphan_before)]
        if due_only:
            where, params = f"{where} AND {_DUE}", [*params, at]
        sql = ("UPDATE runs SET lease_owner = %s, lease_expiry = %s, lease_epoch = lease_epoch + 1, updated_at = %s "
               f"WHERE id = (SELECT id FROM runs WHERE {where} FOR UPDATE SKIP LOCKED)")

        def claim(cur: Cursor) -> RunRecord | None:
            if not cur.execute(sql, params).rowcount:
                return None
            return self._get(cur, run_id)  # a run that does not decode rolls the claim back

        result: RunRecord | None = self._write("claim_run", claim)
        return result

    def claim_due(
        self, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime, limit: int,
    ) -> list[RunRecord | CheckpointCorrupt]:
        at, expiry = format_utc(now), format_utc(now + timedelta(seconds=lease_seconds))

        def claim(cur: Cursor) -> list[tuple[Any, ...]]:
            found = cur.execute(_CLAIM_DUE_SELECT, (at, format_utc(orphan_before), at, limit)).fetchall()
            if found:
                cur.execute(_CLAIM_IDS, (owner, expiry, at, [row[0] for row in found]))
            return found

        found: list[tuple[Any, ...]] = self._write("claim_due", claim)
        return [rows.claimed(row, owner, expiry, at, self.location) for row in found]

    # --- the outage breaker ---

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
            # The common case, a success with the breaker closed and no failures counted, needs no write (nor the
            # breaker row's lock, which every replica would queue on once per run): a failure that lands after this
            # read is simply ordered after this success.
            current = self.get_outage()
            if not current.paused and current.failures == 0:
                return current, None

        def record(cur: Cursor) -> tuple[OutageState, str | None]:
            cur.execute("INSERT INTO recover_outage (id, failures, probes, updated_at) VALUES ('provider', 0, 0, %s) "
                        "ON CONFLICT (id) DO NOTHING", (at,))  # a row deleted by hand comes back closed
            before = self._outage(cur.execute(_OUTAGE_ROW + " FOR UPDATE").fetchone())
            change: str | None = None
            if provider_failure and not before.paused and before.failures + 1 >= threshold:
                # Each column once: Postgres refuses two assignments to one column (SQLite keeps the last).
                cur.execute(
                    "UPDATE recover_outage SET failures = failures + 1, paused_since = %s, probes = 0, "
                    "next_probe_at = %s, probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, last_error = %s, "
                    "updated_at = %s WHERE id = 'provider'",
                    (at, format_utc(first_probe_at), None if error is None else encode(error, run_id="provider"), at),
                )
                change = "opened"
            elif provider_failure:
                cur.execute("UPDATE recover_outage SET failures = failures + 1, updated_at = %s WHERE id = 'provider'",
                            (at,))
            elif before.failures or before.paused:
                cur.execute(f"UPDATE recover_outage SET failures = 0, {_CLEAR_PAUSE}, last_error = NULL, "
                            "updated_at = %s WHERE id = 'provider'", (at,))
                change = "closed" if before.paused else None
            else:
                return before, None  # closed with no failures: nothing to write
            return self._outage(cur.execute(_OUTAGE_ROW).fetchone()), change

        result: tuple[OutageState, str | None] = self._write("record_outcome", record)
        return result

    def _changed(self, point: str, sql: str, params: tuple[Any, ...]) -> bool:
        changed: bool = self._write(point, lambda cur: bool(cur.execute(sql, params).rowcount))
        return changed

    def reserve_probe(self, *, owner: str, now: datetime, expiry: datetime) -> bool:
        at = format_utc(now)
        return self._changed(
            "reserve_probe",
            "UPDATE recover_outage SET probe_owner = %s, probe_run = NULL, probe_expiry = %s, updated_at = %s "
            "WHERE id = 'provider' AND paused_since IS NOT NULL AND (next_probe_at IS NULL OR next_probe_at <= %s) "
            "AND (probe_owner IS NULL OR probe_expiry <= %s)",
            (owner, format_utc(expiry), at, at, at),
        )

    def renew_probe(self, *, owner: str, expiry: datetime, run_id: str | None = None) -> bool:
        return self._changed(
            "renew_probe",
            "UPDATE recover_outage SET probe_expiry = %s, probe_run = COALESCE(%s, probe_run) "
            "WHERE id = 'provider' AND probe_owner = %s",
            (format_utc(expiry), run_id, owner),
        )

    def release_probe(self, *, owner: str, now: datetime, failed: bool, next_probe_at: datetime | None) -> bool:
        sets, params = "probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, updated_at = %s", [format_utc(now)]
        if failed:
            sets += ", probes = probes + 1, next_probe_at = COALESCE(%s, next_probe_at)"
            params.append(None if next_probe_at is None else format_utc(next_probe_at))
        return self._changed("release_probe", f"UPDATE recover_outage SET {sets} WHERE id = 'provider' AND "
                             "probe_owner = %s", (*params, owner))
