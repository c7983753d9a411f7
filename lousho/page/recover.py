"""The recovery state for the page: the recover part's SQLite run store, read read-only with the stdlib.

The run store's tables are a contract (``lousho/recover/schema.py``): ``runs`` (id, agent, kind,
status, attempts, consecutive_failures, last_error JSON {message, code, category, retryable},
next_attempt_at, lease_owner, lease_expiry, healed_from, created_at, updated_at), ``approvals`` and the
one-row ``recover_outage`` breaker. Observe imports no other part, so the page reads them here as data,
by column name. The file is opened ``mode=ro`` with ``query_only``: the page can never write it, and
a read never creates it.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lousho.kernel.errors import UsageError
from lousho.recover.errors import UnsupportedStoreUrl
from lousho.recover.store import parse_url

# Never more rows than a person can read on one page; the counts still cover every run.
MAX_ROWS = 500
_BUSY_TIMEOUT_S = 5.0


class BadRecoverStore(UsageError):
    code = "LOUSHO_OBSERVE_BAD_RECOVER_STORE"
    hint = "pass --recover-store sqlite:///path/to/runs.db (the page reads SQLite run stores only)"


def parse_store_url(url: str) -> Path:
    """The run store's own URL form (``recover.store.parse_url``: ``sqlite:///relative/path`` or
    ``sqlite:////absolute/path``, ``%XX`` escapes decoded) -> its path; SQLite only."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        raise BadRecoverStore(f"--recover-store {url.split('@')[-1]!r}: the page reads SQLite run stores only")
    try:
        return parse_url(url).path
    except UnsupportedStoreUrl:
        raise BadRecoverStore(f"--recover-store {url!r}: expected sqlite:///PATH") from None


@dataclass(frozen=True)
class Outage:
    paused: bool
    failures: int
    probes: int
    paused_since: str | None
    next_probe_at: str | None
    probe_owner: str | None
    probe_run: str | None
    probe_expiry: str | None
    last_error: dict[str, Any] | None


@dataclass(frozen=True)
class RecoveryState:
    counts: dict[str, int]
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    outage: Outage | None = None


def read_state(path: Path) -> RecoveryState:
    """Counts by status, the unfinished runs (quarantined apart), pending approvals and the outage breaker.

    Raises ``sqlite3.Error`` (or FileNotFoundError) when the file cannot be read; the page shows it.
    """
    if not path.exists():
        raise FileNotFoundError(f"no run store at {path}")
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    try:
        con.row_factory = sqlite3.Row
        con.execute("PRAGMA query_only = ON")
        counts = {row["status"]: row["n"] for row in con.execute(
            "SELECT status, count(*) AS n FROM runs GROUP BY status ORDER BY status")}
        unfinished = [_run(row) for row in con.execute(
            "SELECT * FROM runs WHERE status <> 'finished' ORDER BY created_at, id LIMIT ?", (MAX_ROWS,))]
        approvals = [dict(row) for row in con.execute(
            "SELECT id, run_id, tool_name, kind, created_at FROM approvals WHERE status = 'pending' "
            "ORDER BY created_at, id LIMIT ?", (MAX_ROWS,))]
        outage = _outage(con)
    finally:
        con.close()
    return RecoveryState(
        counts=counts,
        quarantined=[r for r in unfinished if r["status"] == "quarantined"],
        pending=[r for r in unfinished if r["status"] != "quarantined"],
        approvals=approvals,
        outage=outage,
    )


def _run(row: sqlite3.Row) -> dict[str, Any]:
    run = dict(row)
    run["last_error"] = _json(run.get("last_error"))
    return run


def _outage(con: sqlite3.Connection) -> Outage | None:
    # The breaker table came with the store's second migration; an older store has none.
    exists = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'recover_outage'").fetchone()
    if exists is None:
        return None
    row = con.execute("SELECT * FROM recover_outage WHERE id = 'provider'").fetchone()
    if row is None:
        return None
    return Outage(
        paused=row["paused_since"] is not None, failures=row["failures"], probes=row["probes"],
        paused_since=row["paused_since"], next_probe_at=row["next_probe_at"], probe_owner=row["probe_owner"],
        probe_run=row["probe_run"], probe_expiry=row["probe_expiry"], last_error=_json(row["last_error"]),
    )


def _json(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {"message": text}
    return value if isinstance(value, dict) else {"message": str(value)}
