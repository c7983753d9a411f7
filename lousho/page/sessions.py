"""The page's sessions list (``/sessions``): conversations, newest first, from the ``sessions`` view."""

from __future__ import annotations

from typing import Any

from lousho.observe.runs.sessions_view import newest_sessions_select
from lousho.page.data import Reader
from lousho.page.html import Safe, el, join, number, segment, table, usd, when

# Runs of one session the list links; a longer session says how many more it has.
SHOWN_RUNS = 20
SESSION_COLUMNS = (f"session_id, agent, turns, run_ids[1:{SHOWN_RUNS}] AS run_ids, len(run_ids) AS run_count, "
                   "epoch_ns(first_at) AS first_ns, epoch_ns(last_at) AS last_ns, "
                   "failed, pass_rate, input_tokens, output_tokens, cost_usd")


def newest_sessions_query(agent: str | None, limit: int, offset: int = 0) -> tuple[str, list[object]]:
    """The query of ``newest_sessions`` and its parameters."""
    return newest_sessions_select(SESSION_COLUMNS, agent, limit, offset)


def newest_sessions(reader: Reader, agent: str | None, limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Up to ``limit`` sessions after the ``offset`` newest, newest first (ties by id: stable across pages)."""
    return reader.rows(*newest_sessions_query(agent, limit, offset))


def render_sessions(rows: list[dict[str, Any]], pages: Safe) -> Safe:
    if not rows:
        body = el("p", "No sessions: runs join one when their spans carry a conversation id "
                  "(gen_ai.conversation.id, session.id, ...).", cls="muted", id="no-sessions")
        return join([el("h1", "Sessions"), body, pages])
    lines = []
    for r in rows:
        runs = [el("a", el("code", run_id), href="/runs/" + segment(run_id)) for run_id in r["run_ids"]]
        if r["run_count"] > len(runs):
            runs.append(el("span", f"and {r['run_count'] - len(runs):,} more", cls="muted"))
        rate = "" if r["pass_rate"] is None else f"{r['pass_rate']:.2f}"
        cost = usd(r["cost_usd"])
        lines.append([el("code", r["session_id"]),
                      el("a", r["agent"], href="/agents/" + segment(r["agent"])) if r["agent"] else "",
                      el("td", number(r["turns"]), cls="num"), join([join([run, " "]) for run in runs]),
                      when(r["first_ns"]), when(r["last_ns"]), el("td", number(r["failed"]), cls="num"),
                      el("td", rate, cls="num"),
                      el("td", number((r["input_tokens"] or 0) + (r["output_tokens"] or 0)), cls="num"),
                      el("td", cost, cls="num")])
    headers = ["session", "agent", "turns", "runs", "first (UTC)", "last (UTC)", "failed", "pass rate", "tokens",
               "cost"]
    return join([el("h1", "Sessions"), el("p", f"{len(rows)} session(s), newest first", cls="muted"),
                 table(headers, lines, id="sessions"), pages])
