"""Failed runs grouped into cases, and recoveries as (untrusted) evidence.

A case is one recorded input: its ``lousho.case.id`` when the run has one, else the input text.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from lousho.analysis.frames import LIVE, resolve_live
from lousho.observe.client.store_client import StoreClient
from lousho.observe.runs.runs_view import runs_select

_FAILED = "(status = 'error' OR passed = false)"

_CASES = """
WITH r AS (
    SELECT * FROM ({runs}) WHERE agent = ? AND harness_revision IS NOT DISTINCT FROM ? AND NOT probe AND {failed}
), checks AS (
    SELECT r.run_id, list(DISTINCT s.failed_check ORDER BY s.failed_check) AS checks
    FROM r JOIN scores s ON s.trace_id = r.last_trace_id
    WHERE s.failed_check IS NOT NULL
    GROUP BY r.run_id
)
SELECT
    coalesce(r.case_id, 'input:' || md5(coalesce(r.input, ''))) AS case_id,
    any_value(r.input) AS input,
    list(r.output ORDER BY r.started_ns) FILTER (WHERE r.output IS NOT NULL) AS failed_outputs,
    list(DISTINCT concat_ws(': ', r.error_type, r.error_message))
        FILTER (WHERE r.error_type IS NOT NULL OR r.error_message IS NOT NULL) AS errors,
    list_sort(list_distinct(flatten(list(c.checks) FILTER (WHERE c.checks IS NOT NULL)))) AS failed_checks,
    list(r.run_id ORDER BY r.started_ns) AS run_ids,
    count(*) AS count,
    min(r.started_at) AS first_seen,
    max(r.started_at) AS last_seen,
    any_value(r.harness_revision) AS revision
FROM r LEFT JOIN checks c USING (run_id)
GROUP BY 1
{having}
ORDER BY count DESC, case_id
"""

_RECOVERIES = """
WITH heal AS (
    SELECT * FROM ({heal_runs}) WHERE agent = ? AND healed_from IS NOT NULL AND passed
), original AS (
    SELECT * FROM ({original_runs}) WHERE {failed}
), note AS (
    SELECT run_id, arg_min(attributes->>'lousho.heal.note', start_ns) AS note
    FROM spans WHERE run_id IN (SELECT run_id FROM heal) GROUP BY run_id
)
SELECT
    coalesce(o.case_id, h.case_id, 'input:' || md5(coalesce(o.input, ''))) AS case_id,
    o.input,
    o.run_id AS failed_run_id,
    o.output AS failed_output,
    concat_ws(': ', o.error_type, o.error_message) AS error,
    h.run_id AS healed_run_id,
    h.output AS healed_output,
    n.note,
    true AS untrusted
FROM heal h
JOIN original o ON o.run_id = h.healed_from AND o.input IS NOT DISTINCT FROM h.input
LEFT JOIN note n ON n.run_id = h.run_id
ORDER BY h.started_ns
"""


def cases_from_failures(
    store: StoreClient, agent: str, revision: str | None = LIVE, recurring_only: bool = False
) -> pl.DataFrame:
    """Failed runs (errored, or failed their check) of one revision, grouped into cases.

    ``revision="live"`` is the newest revision the agent's non-probe runs used: failures of older
    revisions say nothing about the harness in use. Runs with no revision (``revision=None``, or live
    when none of the agent's runs has one) are one unversioned revision. Probe runs are never counted. With
    ``recurring_only`` (auto mode learns only from these), a case must have failed in two or more
    runs. Columns: case_id, input, failed_outputs, errors, failed_checks, run_ids, count,
    first_seen, last_seen, revision. An unknown agent or revision gives an empty frame.
    """
    if revision == LIVE:
        # A live revision of None is the unversioned one (runs with nothing to fingerprint): its cases count.
        found, revision = resolve_live(store, agent)
        if not found:
            return _empty(store, _CASES, agent)
    # ``runs`` is kept (runs_table.py): its rows filtered, not the agent's spans aggregated.
    query = _CASES.format(runs="SELECT * FROM runs", failed=_FAILED,
                          having="HAVING count(*) >= 2" if recurring_only else "")
    return store.sql(query, [agent, revision])


def cases_from_recoveries(store: StoreClient, agent: str, held_out: Iterable[str] = ()) -> pl.DataFrame:
    """Pairs of a failed run and its ``.heal`` fork that passed on the same input, with the fork's
    diagnosis note (``lousho.heal.note``).

    Marked ``untrusted``: a retry that passed is evidence, not proof, so these are never gate runs
    and never protected cases. Held-out cases are left out: an editor must never see them.
    """
    query = _RECOVERIES.format(
        heal_runs=runs_select("agent_name = ? AND healed_from IS NOT NULL"),
        original_runs=runs_select(
            "run_id IN (SELECT healed_from FROM spans WHERE healed_from IS NOT NULL AND agent_name = ?)"
        ),
        failed=_FAILED,
    )
    frame = store.sql(query, [agent, agent, agent])
    excluded = list(held_out)
    if excluded:
        frame = frame.filter(~pl.col("case_id").is_in(excluded))
    return frame


def _empty(store: StoreClient, template: str, agent: str) -> pl.DataFrame:
    query = template.format(runs=runs_select("false"), failed=_FAILED, having="")
    return store.sql(query, [agent, ""])
