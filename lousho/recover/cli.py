"""CLI pieces of the recover part (mounted under ``lousho runs`` by the CLI's owner): ``pending``, ``outage``."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from lousho.cli_support import table_console
from lousho.recover.heal import SUFFIX as HEAL_SUFFIX
from lousho.recover.store import DEFAULT_URL, UNFINISHED, OutageState, RunRecord
from lousho.recover.store import open as open_store
from lousho.safe_text import safe_text, visible

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
        "lease_owner": run.lease_owner,
        "lease_expiry": run.lease_expiry,
        "quarantined": run.status == "quarantined",
    }


def outage_row(state: OutageState) -> dict[str, Any]:
    """The fields ``outage --json`` prints: the recover loop's provider-outage breaker, shared by its replicas."""
    return {
        "paused": state.paused,
        "paused_since": state.paused_since,
        "failures_in_a_row": state.failures,
        "failed_probes": state.probes,
        "next_probe_at": state.next_probe_at,
        "probe_owner": state.probe_owner,
        "probe_run": state.probe_run,
        "probe_expiry": state.probe_expiry,
        "last_error": state.last_error,
    }


def outage_line(state: OutageState) -> str:
    if not state.paused:
        return f"provider: no outage ({state.failures} provider failure(s) in a row)"
    error = state.last_error or {}
    line = (f"provider outage: recovery paused since {state.paused_since} ({error.get('code')}); "
            f"{state.probes} failed probe(s), next probe at {state.next_probe_at}")
    if state.probe_owner:
        line += f"; probe held by {state.probe_owner} until {state.probe_expiry}"
        if state.probe_run:
            line += f" with run {state.probe_run}"
    return line


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def pending(store_url: str, as_json: bool) -> None:
    """List every unfinished run (any status but finished), oldest first."""
    store = open_store(store_url, create=False)  # a read: never create a store as a side effect
    try:
        runs = store.list_runs(statuses=UNFINISHED)
        state = store.get_outage()
        location = store.location
    finally:
        store.close()
    rows = [pending_row(run) for run in runs]
    forks = {run.id for run in runs if run.id.endswith(HEAL_SUFFIX)}
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True, indent=2))
        return
    # Run ids, agents, errors and lease owners come from agents and the store: each is shown as text
    # (safe_text), never markup, with control characters visible.
    console = table_console()
    console.print(safe_text(outage_line(state), "bold red" if state.paused else None))
    if not rows:
        console.print(safe_text(f"no unfinished runs in {location}"))
        return
    table = Table("run_id", "agent", "kind", "status", "attempts", "failures", "last error", "next attempt",
                  "held by", "updated")
    for row in rows:
        error = row["last_error"]
        status = row["status"]
        if row["quarantined"]:
            status = "QUARANTINED"
        elif row["run_id"] + HEAL_SUFFIX in forks:
            status += " (healing)"
        cells = (
            row["run_id"], row["agent"], row["kind"], status, row["attempts"], row["consecutive_failures"],
            _short(visible(f"{error['code']}: {error['message']}")) if error else "",
            row["next_attempt_at"] or "", row["lease_owner"] or "", row["updated_at"],
        )
        table.add_row(*(safe_text(cell) for cell in cells), style="bold red" if row["quarantined"] else None)
    console.print(table)
    console.print(safe_text(f"{len(rows)} unfinished run{'s' if len(rows) != 1 else ''} in {location}"))
    quarantined = [row["run_id"] for row in rows if row["quarantined"]]
    if quarantined:
        console.print(safe_text(f"{len(quarantined)} quarantined (the recover loop no longer resumes them; a person "
                                f"decides): lousho runs resume {quarantined[0]}", "bold red"))


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of a line.")
def outage(store_url: str, as_json: bool) -> None:
    """Show the recover loop's provider-outage state: paused or not, since when, who holds the probe."""
    store = open_store(store_url, create=False)
    try:
        state = store.get_outage()
    finally:
        store.close()
    click.echo(json.dumps(outage_row(state), sort_keys=True, indent=2) if as_json else visible(outage_line(state)))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
