"""The page reads the other parts through their own definitions, and observe imports none of it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from daemon_support import get
from monitor_runs import AGENT, APPLIED_AT, EDIT, DuckStore, watch

import lousho.observe
from lousho.analysis.live_monitor import Monitor
from lousho.analysis.monitor import MonitorConfig
from lousho.analysis.monitor_path import MonitorPath
from lousho.improve.applied_edit import AppliedEdit
from lousho.observe.client.process import start_daemon
from lousho.page.agentdir import watched_edit as page_watched_edit
from lousho.page.data import Reader
from lousho.page.recover import parse_store_url
from lousho.plot.edits import watched_edit as plot_watched_edit
from lousho.recover import durable
from lousho.recover.store import open as open_run_store
from lousho.recover.store import parse_url

OBSERVE = Path(lousho.observe.__file__).parent
# Parts observe may not import (DESIGN §1: observe depends on nothing of ours); the page is mounted by the CLI.
NOT_FROM_OBSERVE = ("lousho.page", "lousho.analysis", "lousho.improve")


def _escaped_store_url(directory: Path) -> str:
    """A run store URL whose path spells the directory's space as %20, as a URL path may."""
    return "sqlite:///" + urllib.parse.quote(str(directory / "runs.db"))


def test_a_percent_escape_in_a_run_store_url_names_the_same_file_for_recover_and_the_page(tmp_path):
    directory = tmp_path / "my runs"
    url = _escaped_store_url(directory)
    assert "%20" in url
    store = open_run_store(url)
    store.close()
    assert (directory / "runs.db").is_file()
    assert not (tmp_path / "my%20runs").exists()
    assert parse_url(url).path == directory / "runs.db" == parse_store_url(url)


@pytest.mark.system
def test_the_recovery_panel_reads_the_run_store_recover_wrote_under_an_escaped_url(tmp_path):
    directory = tmp_path / "my runs"
    url = _escaped_store_url(directory)
    store = open_run_store(url)
    try:
        durable.start(store, "escaped-run", "ledger", "send", {}).fail(TimeoutError("model timed out"))
    finally:
        store.close()
    daemon = start_daemon(tmp_path / "observe.duckdb", "--recover-store", url)
    try:
        reply = get(daemon.url, "/recovery")
        assert reply.status == 200, reply.body[:500]
        pending = reply.body.decode()
        assert "escaped-run" in pending[pending.index('id="pending"'):]
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


def test_the_page_and_plot_read_a_watched_edit_as_the_one_applied_edit(tmp_path):
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    (tmp_path / ".lousho").mkdir()
    state = {"watched": {"before": "rev-1", "after": "rev-2", "applied_at": at.isoformat(), "status": "monitoring"}}
    (tmp_path / ".lousho" / "state.json").write_text(json.dumps(state))
    page, plot = page_watched_edit(tmp_path / ".lousho"), plot_watched_edit(tmp_path)
    assert type(page) is type(plot) is AppliedEdit
    assert (page.before, page.after, page.applied_at, page.status) == ("rev-1", "rev-2", at, "monitoring")
    assert (plot.before, plot.after, plot.applied_at, plot.status) == (page.before, page.after, at, page.status)


def test_the_page_and_plot_draw_the_one_monitor_path():
    from lousho import plot
    from lousho.page import agent, svg

    assert plot.MonitorPath is MonitorPath and agent.MonitorPath is MonitorPath
    # The first look (20 runs per side) crosses, 20/20 against 11/20: its dot is drawn in the rollback colour.
    for config in (MonitorConfig(design="seed"), MonitorConfig()):
        crossing = MonitorPath((True,) * 20, (True,) * 11 + (False,) * 9, config)
        kept = MonitorPath((True,) * 20, (True,) * 20, config)
        assert [p.crosses for p in crossing.at_looks()] == [True] and [p.crosses for p in kept.at_looks()] == [False]
        assert _look_dots(svg.monitor_chart(crossing)) == [("#b3261e", crossing.points[19].z)]
        assert [fill for fill, _ in _look_dots(svg.monitor_chart(kept))] != ["#b3261e"]
        assert crossing.statistic in svg.monitor_chart(crossing)  # the chart's title and axis name the statistic


@pytest.mark.parametrize("held_back", [True, False], ids=["concurrent", "fallen-back-to-stratified"])
@pytest.mark.parametrize("applied_rate", [0.75, 0.9], ids=["worse", "as-good"])
def test_the_page_draws_the_statistic_the_live_monitor_decides_with(held_back, applied_rate, monkeypatch):
    from lousho.analysis import traffic_model
    from lousho.page import agent

    # The rates a decision states are simulated (a second each) and are not drawn: only the z is compared here.
    monkeypatch.setattr(traffic_model, "stated_rates", lambda *args, **kwargs: (0.0, 0.0))
    con = watch(3, held_back=held_back, applied_rate=applied_rate)
    decision = Monitor(DuckStore(con), AGENT, EDIT.before, EDIT.after, APPLIED_AT, MonitorConfig()).check(
        now=APPLIED_AT + timedelta(hours=1))
    assert decision.design == ("concurrent" if held_back else "stratified") and decision.look is not None
    body = agent._edit_path(Reader(con.cursor(), 30.0), AGENT, EDIT)
    dots = _look_dots(body)
    # The dot the page draws at the deciding look is the watcher's z, to the last bit; so is the table's row.
    assert dots[decision.look - 1][1] == decision.z
    assert (dots[decision.look - 1][0] == "#b3261e") == (decision.action == "rollback")
    looks = body[body.index('id="monitor-looks"'):]
    row = f"<td class=\"num\">{decision.base_passes}/{decision.runs}</td>" \
          f"<td class=\"num\">{decision.applied_passes}/{decision.applied_runs}</td>"
    assert row in looks and f"{decision.z:.2f}" in looks
    conclusion = body[body.index('id="monitor-conclusion"'):]
    said = {"rollback": "roll back at the look", "keep": "keep: no look crossed", "continue": "waiting for the look"}
    assert conclusion.split("</strong>")[0].count(said[decision.action]) == 1
    label = "concurrent: 20% of sessions held back" if held_back else "stratified by case"
    assert label in conclusion.split("</p>")[0]
    assert ("session-clustered z" if held_back else "case-stratified z") in body


def _look_dots(svg_text: str) -> list[tuple[str, float]]:
    """(fill, z) of each look's dot, in look order: the value drawn, as the chart's data-z attribute holds it."""
    return [(fill, float(z)) for fill, z in re.findall(r'<circle [^>]*r="5" fill="([^"]+)" data-z="([^"]+)">',
                                                        svg_text)]


def _imports(source: Path) -> list[tuple[str, bool]]:
    """(module, at module level) for every absolute import in ``source``, in functions too."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
    return found


def test_observe_imports_nothing_from_the_page_and_loads_no_analysis_or_improve_module_at_import():
    # __main__ and entry are entry points: they run `lousho observe` with the page wired in.
    sources = [path for path in OBSERVE.rglob("*.py") if path.name not in ("__main__.py", "entry.py")]
    page = {f"{path.name}: {name}" for path in sources for name, _ in _imports(path) if name.startswith("lousho.page")}
    parts = {f"{path.name}: {name}" for path in sources for name, top in _imports(path)
             if top and name.startswith(NOT_FROM_OBSERVE)}
    assert page == set() and parts == set()


@pytest.mark.system
def test_the_daemon_alone_loads_none_of_the_page_analysis_or_improve():
    code = ("import sys, lousho.observe.daemon, lousho.observe.client.cli, lousho.observe.receive.http_app;"
            f"print(sorted(m for m in sys.modules if m.startswith({NOT_FROM_OBSERVE!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_the_page_and_plot_build_the_monitor_the_watch_recorded(monkeypatch):
    """A watch that holds sessions back on the base waits for them, as its watcher does, instead of falling back
    to the stratified design the moment no held-back run has come; an edit with no recorded design does."""
    from dataclasses import replace

    from lousho.analysis import traffic_model
    from lousho.page import agent

    monkeypatch.setattr(traffic_model, "stated_rates", lambda *args, **kwargs: (0.0, 0.0))
    con = watch(3, held_back=False)
    # The agent calls the router, and no session has been held back yet.
    con.execute("UPDATE runs SET traffic_arm = 'candidate' WHERE harness_revision = ?", [EDIT.after])
    held = replace(EDIT, design="concurrent", holdback=0.2)
    now = APPLIED_AT + timedelta(hours=1)
    # The watcher's own monitor (improve/watcher.py) on this watch: waiting for the held-back sessions.
    watcher = Monitor(DuckStore(con), AGENT, EDIT.before, EDIT.after, APPLIED_AT,
                      MonitorConfig(design="concurrent", holdback=0.2), holdback=True).check(now=now)
    assert (watcher.design, watcher.action, watcher.look) == ("concurrent", "continue", None)
    recorded = held.monitor(DuckStore(con), AGENT).check(now=now)
    assert (recorded.design, recorded.action, recorded.design_note) == (
        watcher.design, watcher.action, watcher.design_note)
    assert "waiting for held-back runs" in recorded.design_note
    assert EDIT.monitor(DuckStore(con), AGENT).check(now=now).design == "stratified"
    # The page says which: the concurrent watch with its share, not a stratified path.
    body = agent._edit_path(Reader(con.cursor(), 30.0), AGENT, held)
    assert "stratified by case" not in body and "concurrent: 20% of sessions held back" in body
