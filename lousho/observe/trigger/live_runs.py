"""What the trigger reads of an agent's runs at each look: the SQL over ``runs`` (the local store's, or in a fleet
the lake's) and the seeds' window of outcomes."""

from __future__ import annotations

from typing import Any

# One aggregation over the agent's runs per poll: the live revision (the newest one a run used; none of them
# has one: the unversioned revision, NULL), then the newest scored runs of it and of the others, up to ? each.
LIVE_RUNS = """
WITH r AS (
    SELECT run_id, harness_revision, passed, started_ns
    FROM runs
    WHERE agent = ? AND NOT probe
), live AS (
    SELECT arg_max(harness_revision, started_ns) AS revision FROM r
), scored AS (
    SELECT r.*, live.revision AS live_revision, r.harness_revision IS NOT DISTINCT FROM live.revision AS is_live
    FROM r, live WHERE r.passed IS NOT NULL
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY is_live ORDER BY started_ns DESC, run_id DESC) AS k FROM scored
)
SELECT live_revision AS revision, is_live, passed
FROM ranked
WHERE k <= ?
ORDER BY started_ns DESC, run_id DESC
"""
LIVE_REVISION = """
SELECT arg_max(harness_revision, started_ns) AS revision, count(*) AS runs FROM runs
WHERE agent = ? AND NOT probe
"""
# The revision's runs that ended after the detector's last one (ended_us, run_id) and before the cutoff.
NEW_RUNS = """
SELECT run_id, passed, conversation_id AS session, epoch_us(ended_at) AS ended_us FROM runs
WHERE agent = ? AND NOT probe AND harness_revision IS NOT DISTINCT FROM ? AND epoch_us(ended_at) <= ?
  AND (epoch_us(ended_at) > ? OR (epoch_us(ended_at) = ? AND run_id > ?))
ORDER BY ended_us, run_id
LIMIT ?
"""
# Runs read per query; a look reads on until it has them all.
BATCH = 50_000


def live_window(rows: list[dict[str, Any]], window: int) -> list[bool]:
    """The outcomes the detector judges, oldest first, from ``rows`` (newest first, ``is_live`` and ``passed``):
    the live revision's newest ``2 * window``; while it has fewer, its newest ``window`` after the ``window``
    runs before them, of whatever revision: a new revision (a changed prompt) is watched against the one
    before it, not only against itself."""
    live = [i for i, r in enumerate(rows) if r["is_live"]]
    if len(live) >= 2 * window or len(live) < window:
        chosen = live[:2 * window]
    else:
        start = live[window - 1] + 1  # the row after the oldest of the live revision's newest window
        chosen = live[:window] + list(range(start, min(start + window, len(rows))))
    return [bool(rows[i]["passed"]) for i in reversed(chosen)]
