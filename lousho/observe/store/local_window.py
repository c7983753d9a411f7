"""The local store's window in a fleet: traces older than ``--local-days`` leave it once the lake holds them.

Whole traces go, never part of one: a trace is removed when its newest span ended before the cutoff and every
one of its rows has a ``commit_seq`` the lake's position covers (lake/lake_shipper.py), so nothing leaves the
machine's store before it is in the lake. Their scores go with them, and the kept runs are made again from
the spans that stay (``runs_table.REBUILD``, in the same transaction, as compaction does), so ``runs`` and
``sessions`` answer over the window. It runs on the writer's connection while the loader is idle, at most once
per ``--local-prune-every`` (an hour by default): the rebuild costs a fold of the window.

The store also keeps the lake name it ships under (``lousho_lake_identity``, one row): the lake keeps positions
per name, so a store shipping under a new name (a recreated container's new hostname) would send everything again.
"""

from __future__ import annotations

import duckdb

_OLD_TRACES = """
CREATE OR REPLACE TEMP TABLE lousho_old_traces AS
SELECT trace_id FROM span_rows GROUP BY trace_id
HAVING max(end_ns) < $cutoff AND max(commit_seq) <= $shipped
"""
_DELETE_SCORES = "DELETE FROM scores WHERE trace_id IN (SELECT trace_id FROM lousho_old_traces)"
_DELETE_SPANS = "DELETE FROM span_rows WHERE trace_id IN (SELECT trace_id FROM lousho_old_traces)"


def prune(con: duckdb.DuckDBPyConnection, cutoff_ns: int, shipped: int, when_removed: tuple[str, ...]) -> int:
    """Remove the traces that ended before ``cutoff_ns`` and are in the lake (``commit_seq <= shipped``), in one
    transaction with ``when_removed`` (the kept runs made again) when any went; returns the spans removed."""
    con.execute("BEGIN")
    try:
        con.execute(_OLD_TRACES, {"cutoff": cutoff_ns, "shipped": shipped})
        con.execute(_DELETE_SCORES)
        (removed,) = con.execute(_DELETE_SPANS).fetchone() or (0,)
        for statement in when_removed if removed else ():
            con.execute(statement)
        con.execute("DROP TABLE lousho_old_traces")
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # deliberate: the prune's own error is the one to report
        raise
    return int(removed)
