"""The SQL of one row per session: the runs that share a conversation id.

A session is what the GenAI conventions call a conversation (``gen_ai.conversation.id``; OpenInference
``session.id``, Langfuse ``langfuse.session.id``, ``thread_id``, Traceloop association properties:
column ``conversation_id``). Each run in it is one turn. A run that errored counts as failed in the pass
rate, one with no verdict is left out of it.
"""

from __future__ import annotations

_TEMPLATE = """
SELECT
    conversation_id AS session_id,
    arg_min(agent, started_ns) AS agent,
    count(*) AS turns,
    list(run_id ORDER BY started_ns, run_id) AS run_ids,
    min(started_at) AS first_at,
    max(ended_at) AS last_at,
    count(*) FILTER (WHERE status = 'error' OR passed = false) AS failed,
    avg(CASE WHEN status = 'error' THEN 0 WHEN passed IS NOT NULL THEN passed::INTEGER END) AS pass_rate,
    sum(input_tokens)::BIGINT AS input_tokens,
    sum(output_tokens)::BIGINT AS output_tokens,
    sum(cost_usd) AS cost_usd
FROM {runs}
WHERE conversation_id IS NOT NULL {where}
GROUP BY conversation_id
"""


def sessions_select(runs: str = "runs", where: str = "") -> str:
    """One row per session over the relation ``runs`` (a table, view or parenthesised query with the
    runs columns); ``where``, a further condition on those runs (e.g. which conversations)."""
    return _TEMPLATE.format(runs=runs, where=f"AND ({where})" if where else "")


SESSIONS_SELECT = sessions_select()
