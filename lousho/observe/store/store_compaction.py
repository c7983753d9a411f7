"""Loading the recent-key filter from the store, and removing any duplicate span that got past it.

``spans`` and ``scores`` have no primary key (schema migration 4); the spans are rows of ``span_rows``, which
``spans`` is a view of (migration 5): rowids and deletes are the table's. The writer drops a re-sent span when its key
is in ``RecentKeys``; a span whose twin is older than the filter's window, or that met a collision of the key's
64-bit mix, is stored twice until ``compact`` runs: the writer runs it at start and when idle, on the spans
committed since the last check (``lousho_compaction.checked_ns``, a commit time), keeping the copy stored first,
as ``INSERT OR IGNORE`` did.
"""

from __future__ import annotations

import duckdb
import numpy as np

from lousho.observe.runs import span_key_sql
from lousho.observe.store.recent_keys import RecentKeys

_NEWEST_KEYS = f"""
SELECT {span_key_sql.hi()} AS hi, {span_key_sql.lo()} AS lo
FROM span_rows WHERE rowid > (SELECT max(rowid) FROM span_rows) - ? ORDER BY rowid
"""
# The copies after the first of each key that has a copy committed since the check. Scores go first: once a
# span's later copies are gone, its key no longer shows among the spans committed since the check. The keys are
# matched and partitioned by their halves (span_key_sql.py), never hashed whole.
_RECENT = "(SELECT span_key FROM span_rows WHERE received_ns > $checked) recent"
_DELETE_SCORES = f"""
DELETE FROM scores WHERE rowid IN (
    SELECT rowid FROM (
        SELECT s.rowid, row_number() OVER (PARTITION BY {span_key_sql.halves('s.span_key')}, s.seq ORDER BY s.rowid)
            AS copy
        FROM scores s SEMI JOIN {_RECENT} ON {span_key_sql.same('s.span_key', 'recent.span_key')}
    ) WHERE copy > 1
)
"""
_DELETE_SPANS = f"""
DELETE FROM span_rows WHERE rowid IN (
    SELECT rowid FROM (
        SELECT s.rowid, row_number() OVER (PARTITION BY {span_key_sql.halves('s.span_key')}
                                           ORDER BY s.received_ns, s.rowid) AS copy
        FROM span_rows s SEMI JOIN {_RECENT} ON {span_key_sql.same('s.span_key', 'recent.span_key')}
    ) WHERE copy > 1
)
"""


def load_recent(con: duckdb.DuckDBPyConnection, keys: RecentKeys) -> None:
    """Fill ``keys`` with the newest stored spans' keys, oldest first, so a re-send across a restart is caught."""
    arrays = con.execute(_NEWEST_KEYS, [keys.capacity]).fetchnumpy()
    hi = np.asarray(arrays["hi"], dtype=np.uint64)
    lo = np.asarray(arrays["lo"], dtype=np.uint64)
    step = max(1, keys.capacity // 32)
    for start in range(0, len(hi), step):  # generation by generation, so eviction drops the oldest first
        keys.add(hi[start:start + step], lo[start:start + step])
    (total,) = con.execute("SELECT count(*) FROM spans").fetchone() or (0,)
    if total > len(hi):
        keys.complete = False


def last_commit_ns(con: duckdb.DuckDBPyConnection) -> int:
    (newest,) = con.execute("SELECT coalesce(max(received_ns), 0) FROM spans").fetchone() or (0,)
    return int(newest)


def checked_ns(con: duckdb.DuckDBPyConnection) -> int:
    (checked,) = con.execute("SELECT coalesce(max(checked_ns), 0) FROM lousho_compaction").fetchone() or (0,)
    return int(checked)


def compact(con: duckdb.DuckDBPyConnection, when_removed: tuple[str, ...] = ()) -> int:
    """Remove later copies of every span key committed since the last check; return the spans removed.

    One transaction, on the writer's connection (nothing else writes meanwhile). Idempotent: a second run finds
    no copy, and only moves ``checked_ns`` up to the newest commit. ``when_removed`` runs in the same transaction
    if any copy went: what was derived from the copies (the kept runs) is made again.
    """
    con.execute("BEGIN")
    try:
        checked = checked_ns(con)
        newest = last_commit_ns(con)
        removed = 0
        if newest > checked:
            con.execute(_DELETE_SCORES, {"checked": checked})
            removed = _count(con.execute(_DELETE_SPANS, {"checked": checked}).fetchall())
            for statement in when_removed if removed else ():
                con.execute(statement)
            con.execute("UPDATE lousho_compaction SET checked_ns = ?", [newest])
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # deliberate: the compaction's own error is the one to report (an invalidated database refuses this)
        raise
    return removed


def mark_checked(con: duckdb.DuckDBPyConnection) -> None:
    """Record that every span committed so far is known unique (the filter held every key when it was added)."""
    con.execute("UPDATE lousho_compaction SET checked_ns = (SELECT coalesce(max(received_ns), 0) FROM spans)")


def _count(rows: list[tuple]) -> int:
    return int(rows[0][0]) if rows else 0
