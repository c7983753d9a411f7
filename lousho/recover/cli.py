"""CLI pieces of the recover part (mounted under ``lousho runs`` by the CLI's owner): ``pending``."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from lousho.recover.store import DEFAULT_URL, UNFINISHED, RunRecord
from lousho.recover.store import open as open_store

store_option = click.option(
    "--store", "store_url", envvar="LOUSHO_STORE", default=DEFAULT_URL, show_default=True,
    help="Run store URL [env LOUSHO_STORE].",
)


def pending_row(run: RunRecord) -> dict[str, Any]:
    """The fields ``pending --json`` prints for one run."""
    return {
        "run_id": run.id,
        "agent": run.agent,
        "kind": run.kind,
        "status": run.status,
        "attempts": run.attempts,
        "consecutive_failures": run.consecutive_failures,
        "last_error": run.last_error,
        "next_attempt_at": run.next_attempt_at,
        "updated_at": run.updated_at,
        "healed_from": run.healed_from,
    }


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def pending(store_url: str, as_json: bool) -> None:
    """List every unfinished run (any status but finished), oldest first."""
    store = open_store(store_url, create=False)  # a read: never create a store as a side effect
    try:
        rows = [pending_row(run) for run in store.list_runs(statuses=UNFINISHED)]
        location = store.location
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True, indent=2))
        return
    if not rows:
        click.echo(f"no unfinished runs in {location}")
        return
    table = Table("run_id", "agent", "kind", "status", "attempts", "failures", "last error", "next attempt",
                  "updated")
    for row in rows:
        error = row["last_error"]
        table.add_row(
            row["run_id"], row["agent"], row["kind"], row["status"], str(row["attempts"]),
            str(row["consecutive_failures"]), _short(f"{error['code']}: {error['message']}") if error else "",
            row["next_attempt_at"] or "", row["updated_at"],
        )
    # A pipe gets a wide table rather than 80 folded columns (as observe's tables do).
    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    console.print(table)
    console.print(f"{len(rows)} unfinished run{'s' if len(rows) != 1 else ''} in {location}")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
