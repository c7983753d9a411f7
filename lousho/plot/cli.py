"""``lousho plot``: images of the monitor's path for an applied edit and of pass rates by revision.

matplotlib is imported only when a plot is drawn (by ``monitor_plot`` and ``pass_rate_plot``), so
``lousho plot --help`` stays fast.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import click

from lousho.analysis._names import DESIGNS, RULES
from lousho.observe.client.cli import open_store, target_options
from lousho.observe.client.store_client import StoreClient, connect
from lousho.plot.errors import NoRuns, UnknownAgent

_OUT = click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
                    help="The image to write: .png (or .svg, .pdf); parent directories are created.")


@click.group()
def plot() -> None:
    """Draw what the store holds: the monitor's path, pass rates by harness revision."""


@plot.command("monitor")
@click.argument("agent_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@_OUT
@click.option("--observe", default=None, metavar="URL|FILE",
              help="Read runs from this daemon URL or DuckDB file (as `lousho improve --observe`).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Read runs from this DuckDB file directly (read-only).")
@click.option("--token", envvar="LOUSHO_TOKEN", default=None, help="The daemon's bearer token [env LOUSHO_TOKEN].")
@click.option("--revision", default=None, metavar="REV",
              help="Draw the audit log's apply of this revision instead of the watched edit in .lousho/state.json.")
@click.option("--rule", type=click.Choice(RULES), default="seed", show_default=True,
              help="The boundary to draw and decide with (every rule but seed at one-sided 0.05).")
@click.option("--design", type=click.Choice(DESIGNS), default=None,
              help="The monitor's comparison (default: the one the watch recorded, else concurrent): concurrent "
                   "(the held-back sessions; stratified when none ran), stratified (by case, the base runs before "
                   "the apply) or seed.")
def monitor(agent_dir: Path, out: Path, observe: str | None, db: Path | None, token: str | None,
            revision: str | None, rule: str, design: str | None) -> None:
    """The watched edit of AGENT_DIR: each arm's pass rate, and the statistic of the design that decides (the
    session-clustered z of a concurrent watch, the case-stratified z of a stratified one, the seeds' pooled z)
    against the boundary at the looks (20/40/60 runs by default)."""
    from lousho.analysis.monitor import MonitorConfig
    from lousho.improve.harness import agent_name
    from lousho.improve.state import Paths, load_config
    from lousho.plot._canvas import output_format, save
    from lousho.plot.edits import applied_edit, judged_revisions, watched_edit
    from lousho.plot.monitor_plot import draw_monitor, monitor_path

    output_format(out)
    edit = applied_edit(agent_dir, revision) if revision else watched_edit(agent_dir)
    # The name the loop records and watches the agent's runs under (agent.toml's, without running tools.py).
    agent = agent_name(agent_dir)
    # The watcher's own monitor settings, so the plot shows the decision the loop makes.
    max_age = timedelta(days=load_config(Paths(agent_dir)).monitor_max_age_days)
    config = MonitorConfig(rule=rule, max_age=max_age, design=design or edit.design or "concurrent")
    store = _monitor_store(observe, db, token)
    try:
        monitor = monitor_path(store, agent, edit, config)
    except NoRuns as e:
        judged = [r for r in judged_revisions(agent_dir) if r != edit.after]
        if revision is None and judged:
            hint = f"the last edit the monitor judged on live runs: --revision {judged[-1]}"
            raise NoRuns(e.message, hint=hint) from None
        raise
    finally:
        store.close()
    save(draw_monitor(monitor), out)
    click.echo(f"wrote {out}: {monitor.decision.action}: {monitor.decision.reason}")


@plot.command("pass-rate")
@click.option("--agent", required=True, help="The agent whose live runs to draw.")
@_OUT
@target_options
def pass_rate(agent: str, out: Path, url: str | None, db: Path | None, token: str | None) -> None:
    """Pass rate by harness revision over time, with 95% intervals clustered by session (scored live runs only)."""
    from lousho.analysis.frames import runs
    from lousho.plot._canvas import output_format, save
    from lousho.plot.pass_rate_plot import draw_pass_rates, pass_rate_paths

    output_format(out)
    store = open_store(url, db, token)
    try:
        frame = runs(store, agent=agent)
        if frame.height == 0:
            _unknown_agent(store, agent)
    finally:
        store.close()
    paths = pass_rate_paths(frame)
    if paths.height == 0:
        raise NoRuns(f"agent {agent!r}: {frame.height} live runs in {store.target}, none scored (no pass/fail)")
    save(draw_pass_rates(agent, paths), out)
    click.echo(f"wrote {out}: {paths.height} scored runs over "
               f"{paths['harness_revision'].n_unique()} harness revisions")


def _monitor_store(observe: str | None, db: Path | None, token: str | None) -> StoreClient:
    if observe and db:
        raise click.UsageError("give --observe or --db, not both")
    if observe:
        return connect(observe, token=token)
    return open_store(None, db, token)


def _unknown_agent(store: StoreClient, agent: str) -> None:
    known = store.sql("SELECT DISTINCT agent FROM runs WHERE agent IS NOT NULL AND NOT probe ORDER BY agent")
    names = known["agent"].to_list()
    listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    raise UnknownAgent(f"no live runs of agent {agent!r} in {store.target}",
                       hint=f"agents with live runs: {listed}" if names else "the store has no live runs yet")
