"""The recover part's commands, mounted by the CLI's owner: ``lousho recover`` (``recover_command``), and under
``lousho runs`` the store's views ``pending`` and ``outage``.

``lousho recover`` runs the recover loop in the foreground until SIGTERM or SIGINT (exit 0). The first signal lets
the run in hand finish, then exits 0; a second one exits at once, and that run's lease lapses so that another
replica takes it over. The app is named ``MODULE:OBJ``: an object with ``resume(run_id, epoch)``, such a function,
or a class whose no-argument instances have it (see ``loop.RecoverApp``). The current directory is importable, as
for ``python -m``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import click
from rich.table import Table

from lousho.kernel.cli_support import table_console
from lousho.kernel.text_safety import safe_text, visible
from lousho.recover.errors import AppInvalid
from lousho.recover.heal import SUFFIX as HEAL_SUFFIX
from lousho.recover.lease import LEASE_SECONDS
from lousho.recover.loop import recover
from lousho.recover.store import DEFAULT_URL, UNFINISHED, OutageState, StoredRun
from lousho.recover.store import open as open_store

store_option = click.option(
    "--store", "store_url", envvar="LOUSHO_STORE", default=DEFAULT_URL, show_default=True,
    help="Run store URL [env LOUSHO_STORE].",
)


def pending_row(run: StoredRun) -> dict[str, Any]:
    """The fields ``pending --json`` prints for one run."""
    return {"run_id": run.id, **_fields(run, "agent", "kind", "status", "attempts", "consecutive_failures",
                                        "last_error", "next_attempt_at", "updated_at", "healed_from", "lease_owner",
                                        "lease_expiry"),
            "quarantined": run.status == "quarantined"}


def outage_row(state: OutageState) -> dict[str, Any]:
    """The fields ``outage --json`` prints: the recover loop's provider-outage breaker, shared by its replicas."""
    return {"paused": state.paused, "paused_since": state.paused_since, "failures_in_a_row": state.failures,
            "failed_probes": state.probes,
            **_fields(state, "next_probe_at", "probe_owner", "probe_run", "probe_expiry", "last_error")}


def _fields(record: object, *names: str) -> dict[str, Any]:
    """The record's attributes under their own names, in the order given (the JSON output's order)."""
    return {name: getattr(record, name) for name in names}


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


# --- lousho recover ---

log = logging.getLogger("lousho.recover.cli")


def load_app(spec: str) -> Callable[[str, int], object] | Any:
    """The app ``MODULE:OBJ`` names (``OBJ`` may be dotted: ``pkg.mod:Factory.app``)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AppInvalid(spec, "expected MODULE:OBJ")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise AppInvalid(spec, f"cannot import {module_name}: {e}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AppInvalid(spec, f"{module_name} has no {attribute}")
        target = getattr(target, part)
    if isinstance(target, type):
        try:
            target = target()
        except Exception as e:  # deliberate: a factory that fails is one clear usage error
            raise AppInvalid(spec, f"{attribute}() failed: {type(e).__name__}: {e}") from None
    if callable(getattr(target, "resume", None)) or callable(target):
        return target
    raise AppInvalid(spec, f"{attribute} has no resume(run_id, epoch) and is not callable")


def _configure_logging(level: str) -> None:
    """Decisions (``lousho.recover``) and callbacks (``lousho.recover.cli``) to stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("lousho.recover")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


@click.command("recover")
@click.option("--app", "app_spec", required=True, metavar="MODULE:OBJ",
              help="What resumes a run: OBJ.resume(run_id, epoch), a function of (run_id, epoch), or a class.")
@store_option
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds between ticks; also the backoff's base.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=10, show_default=True,
              help="Failures in a row that quarantine a run.")
@click.option("--retry-with-diagnosis", is_flag=True,
              help="Give a run at the cap one more try as a <id>.heal fork with a note saying why it failed.")
@click.option("--lease-seconds", type=click.FloatRange(min=0, min_open=True), default=LEASE_SECONDS,
              show_default=True, help="How long a claimed run stays this process's without a heartbeat.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info", show_default=True)
def recover_command(app_spec: str, store_url: str, interval: float, max_attempts: int, retry_with_diagnosis: bool,
                    lease_seconds: float, log_level: str) -> None:
    """Resume interrupted runs of the store until SIGTERM or SIGINT; any number of processes may run it."""
    app = load_app(app_spec)
    # An app that opens the run store itself must open the one this loop recovers.
    use_store_url = getattr(app, "use_store_url", None)
    if callable(use_store_url):
        use_store_url(store_url)
    _configure_logging(log_level)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():  # a second signal: go now; the run in hand goes to another replica when its lease lapses
            log.warning("received %s again: exiting without finishing the run in hand", name)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        log.info("received %s: finishing the run in hand, then stopping (again to exit at once)", name)
        stop.set()

    def on_quarantined(run: StoredRun) -> None:
        error = run.last_error or {}
        log.warning("on_quarantined run=%s failures=%d code=%s: a person decides (lousho runs resume %s)", run.id,
                    run.consecutive_failures, error.get("code"), run.id)

    def on_error(error: BaseException) -> None:
        log.error("on_error %s: %s", type(error).__name__, error)

    store = open_store(store_url)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        handle = recover(
            store, app, interval=interval, max_attempts=max_attempts, retry_with_diagnosis=retry_with_diagnosis,
            lease_seconds=lease_seconds, stop_event=stop,
            on_recovered=lambda run_id: log.info("on_recovered run=%s", run_id),
            on_quarantined=on_quarantined,
            on_outage=lambda paused: log.warning("on_outage paused=%s: %s", paused,
                                                 "provider outage, recovery paused" if paused else "resuming"),
            on_error=on_error,
        )
        log.info("recovering runs of %s every %g s as %s", store.location, interval, handle.loop.owner)
        while not handle.join(timeout=0.5):  # short waits, so the main thread gets to run the signal handler
            pass
        log.info("stopped")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()
