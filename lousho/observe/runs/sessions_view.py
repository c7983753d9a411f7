"""The SQL of one row per session: the runs that share a conversation id.

A session is what the GenAI conventions call a conversation (``gen_ai.conversation.id``; OpenInference
``session.id``, Langfuse ``langfuse.session.id``, ``thread_id``, Traceloop association properties:
column ``conversation_id``). Each run in it is one turn. A run that errored counts as failed in the pass
rate, one with no verdict is left out of it.

A session's ``run_ids`` list holds every run of it, so a store does not keep it in a row: a row rewritten
whenever one of its runs changed would rewrite the whole list, and a framework's default thread id puts
thousands of runs in one session. The kept sessions hold the other columns (``sessions_select(...,
run_ids=False)``); the view makes the lists from the kept runs when a query reads them (``with_run_ids``), and
a page of sessions makes only its own (``picked_sessions_select``).
"""

from __future__ import annotations

_AGGREGATES = (
    ("agent", "arg_min(agent, started_ns)"),
    ("turns", "count(*)"),
    ("run_ids", "list(run_id ORDER BY started_ns, run_id)"),
    ("first_at", "min(started_at)"),
    ("last_at", "max(ended_at)"),
    ("failed", "count(*) FILTER (WHERE status = 'error' OR passed = false)"),
    ("pass_rate", "avg(CASE WHEN status = 'error' THEN 0 WHEN passed IS NOT NULL THEN passed::INTEGER END)"),
    ("input_tokens", "sum(input_tokens)::BIGINT"),
    ("output_tokens", "sum(output_tokens)::BIGINT"),
    ("cost_usd", "sum(cost_usd)"),
)
COLUMNS = ("session_id", *(name for name, _ in _AGGREGATES))
"""The columns of ``sessions``, in order."""


def sessions_select(runs: str = "runs", where: str = "", *, run_ids: bool = True) -> str:
    """One row per session over the relation ``runs`` (a table, view or parenthesised query with the
    runs columns); ``where``, a further condition on those runs (e.g. which conversations); without the
    ``run_ids`` column unless ``run_ids``."""
    columns = ",\n    ".join(f"{sql} AS {name}" for name, sql in _AGGREGATES if run_ids or name != "run_ids")
    return f"""
SELECT
    conversation_id AS session_id,
    {columns}
FROM {runs}
WHERE conversation_id IS NOT NULL {f"AND ({where})" if where else ""}
GROUP BY conversation_id
"""


def _run_lists(runs: str, pick: str = "") -> str:
    """Each session's run ids from ``runs`` (alias ``r``), of the sessions ``pick`` (a join) keeps. No WHERE: DuckDB
    drops a left join whose columns a query does not read only if no filter reaches the joined side's scans, so the
    runs without a session make a group of their own, with no list, never joined."""
    return (f"SELECT conversation_id AS session_id, {dict(_AGGREGATES)['run_ids']} "
            f"FILTER (WHERE conversation_id IS NOT NULL) AS run_ids FROM {runs} r {pick} GROUP BY conversation_id")


def _joined(sessions: str, lists: str, run_ids: str = "r.run_ids") -> str:
    """The columns of ``sessions`` (alias ``s``) in the view's order, ``run_ids`` from the left join of ``lists``."""
    columns = ", ".join(f"{run_ids} AS run_ids" if name == "run_ids" else f"s.{name}" for name in COLUMNS)
    return f"SELECT {columns} FROM {sessions} s LEFT JOIN ({lists}) r ON r.session_id = s.session_id"


def with_run_ids(sessions: str, runs: str) -> str:
    """The rows of ``sessions`` (a relation with every column but ``run_ids``, and ``own_run_ids``: the lists of the
    sessions whose runs ``runs`` does not hold as they are, NULL for the others) with the others' run ids from
    ``runs`` (a table), in the view's column order. DuckDB drops the join when a query reads no ``run_ids`` (most:
    counts, pass rates), but not from under a materialized CTE, nor when a filter reaches ``runs``: any CTE of
    ``sessions`` must be inside it."""
    return _joined(sessions, _run_lists(runs), "coalesce(s.own_run_ids, r.run_ids)")


def picked_sessions_select(columns: str, where: str, order: str) -> str:
    """``columns`` (SQL over the sessions columns) of the ``sessions`` rows that ``where`` and ``order`` (SQL over
    them; then ``LIMIT ? OFFSET ?``) pick, their ``run_ids`` made for those sessions alone. Asked of the view, a
    page of sessions with their run ids makes every session's list before it picks the page (half a second over
    a million runs); picked first, the lists cost a lookup of the picked sessions' runs."""
    lists = _run_lists("runs", "SEMI JOIN picked p ON r.conversation_id = p.session_id")
    return (f"WITH picked AS MATERIALIZED (SELECT * EXCLUDE (run_ids) FROM sessions {where} ORDER BY {order} "
            f"LIMIT ? OFFSET ?) SELECT {columns} FROM ({_joined('picked', lists)}) ORDER BY {order}")


def newest_sessions_select(columns: str, agent: str | None, limit: int, offset: int = 0) -> tuple[str, list[object]]:
    """``columns`` of up to ``limit`` sessions after the ``offset`` newest (of ``agent``, if given), newest first,
    ties by id (stable across pages): the query and its parameters, as the page and ``lousho sessions`` ask."""
    where, params = ("WHERE agent = ?", [agent]) if agent else ("", [])
    return picked_sessions_select(columns, where, "last_at DESC, session_id"), [*params, limit, offset]
