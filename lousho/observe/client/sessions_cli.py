"""``lousho sessions``: the conversations in the store, newest first (the ``sessions`` view)."""

from __future__ import annotations

from pathlib import Path

import click

from lousho.observe.client.cli import open_store, target_options
from lousho.observe.client.render import print_frame
from lousho.observe.runs.sessions_view import newest_sessions_select

_COLUMNS = ("session_id, agent, turns, run_ids, first_at, last_at, failed, pass_rate, input_tokens, "
            "output_tokens, cost_usd")


def newest_sessions_query(agent: str | None, limit: int) -> tuple[str, list[object]]:
    """The query of ``lousho sessions`` and its parameters."""
    return newest_sessions_select(_COLUMNS, agent, limit)


@click.command()
@target_options
@click.option("--agent", default=None, help="Only this agent's sessions.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array of session objects.")
def sessions(url: str | None, db: Path | None, token: str | None, agent: str | None, limit: int,
             as_json: bool) -> None:
    """List sessions (runs sharing a conversation id), newest first."""
    store = open_store(url, db, token)
    try:
        frame = store.sql(*newest_sessions_query(agent, limit))
    finally:
        store.close()
    if as_json:
        print_frame(frame, "json")
    else:
        print_frame(frame.drop("run_ids"), "table")
