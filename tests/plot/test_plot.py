"""`lousho plot monitor` and `lousho plot pass-rate` write real PNGs from a demo store; their errors are
one line with a code and a hint, never a traceback."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from monitor_runs import AGENT, APPLIED_AT, EDIT, DuckStore, watch

from lousho.cli import COMMANDS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXAMPLE_AGENT = Path(__file__).resolve().parents[2] / "lousho" / "agent" / "example"


@pytest.fixture(scope="module")
def demo_dir(demo_run) -> Path:  # type: ignore[no-untyped-def]
    """What `make demo` leaves behind: observe.duckdb, agent/ with its .lousho/ loop state, runs.db."""
    return demo_run.dir


def plot(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # Through `lousho plot` once the group is registered in lousho/cli.py; until then its own entry point.
    entry = ["-m", "lousho", "plot"] if "plot" in COMMANDS else ["-m", "lousho.plot"]
    return subprocess.run([sys.executable, *entry, *map(str, args)], capture_output=True, text=True, timeout=120)


def judged_revision(agent_dir: Path) -> str:
    """The revision of the last apply the watcher's monitor decided on (read from the audit log)."""
    entries = [json.loads(line) for line in (agent_dir / ".lousho" / "audit.jsonl").read_text().splitlines()]
    last = max(i for i, e in enumerate(entries) if e["action"] == "monitor")
    return next(e["after"] for e in reversed(entries[:last]) if e["action"] == "apply")


def assert_png_with_content(path: Path, min_width: int, min_height: int) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 10_000, f"{len(data)} bytes: too small for a drawn plot"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")  # the first chunk of every PNG
    width, height = struct.unpack(">II", data[16:24])
    assert width >= min_width and height >= min_height, (width, height)
    from matplotlib.image import imread

    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    rgb = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50, "hardly any colours: the image is blank or flat"
    assert rgb.std() > 0.05
    assert (rgb.min(axis=1) < 0.9).mean() > 0.02, "almost every pixel is white"


def assert_clean_error(result: subprocess.CompletedProcess[str], exit_code: int, code: str) -> None:
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert f"error {code}: " in result.stderr
    assert "hint: " in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.system
def test_plot_monitor_draws_the_judged_edit_as_a_png(demo_dir: Path, tmp_path: Path):
    agent_dir = demo_dir / "agent"
    out = tmp_path / "figures" / "monitor.png"
    result = plot("monitor", agent_dir, "--revision", judged_revision(agent_dir),
                  "--db", demo_dir / "observe.duckdb", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"wrote {out}: keep: no regression by the last look" in result.stdout  # the demo's monitor kept it
    assert_png_with_content(out, 800, 600)


@pytest.mark.slow
@pytest.mark.system
def test_plot_monitor_reads_the_agents_name_without_running_its_tools(demo_dir: Path, tmp_path: Path):
    """The name comes from agent.toml as the loop reads it: drawing a plot runs none of the agent's code."""
    agent_dir = tmp_path / "agent"
    shutil.copytree(demo_dir / "agent", agent_dir)
    (agent_dir / "tools.py").write_text("raise RuntimeError('the agent ran to draw a plot')\n")
    out = tmp_path / "monitor.png"
    result = plot("monitor", agent_dir, "--revision", judged_revision(agent_dir),
                  "--db", demo_dir / "observe.duckdb", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"wrote {out}: keep: no regression by the last look" in result.stdout
    assert_png_with_content(out, 800, 600)


@pytest.mark.slow
@pytest.mark.system
def test_plot_pass_rate_draws_every_harness_revision_as_a_png(demo_dir: Path, tmp_path: Path):
    agent = tomllib.loads((demo_dir / "agent" / "agent.toml").read_text())["name"]
    out = tmp_path / "pass-rate.png"
    result = plot("pass-rate", "--agent", agent, "--db", demo_dir / "observe.duckdb", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "scored runs over 2 harness revisions" in result.stdout  # before and after the applied fix
    assert_png_with_content(out, 800, 400)



def test_plot_to_a_path_it_cannot_write_is_a_usage_error(demo_dir: Path, tmp_path: Path):
    agent = tomllib.loads((demo_dir / "agent" / "agent.toml").read_text())["name"]
    (tmp_path / "a-file").write_text("")
    result = plot("pass-rate", "--agent", agent, "--db", demo_dir / "observe.duckdb",
                  "--out", tmp_path / "a-file" / "p.png")  # a file where the directory must be
    assert_clean_error(result, 2, "LOUSHO_PLOT_BAD_OUTPUT")
    assert "cannot write" in result.stderr

@pytest.mark.slow
@pytest.mark.system
def test_plot_monitor_of_an_edit_without_live_runs_exits_1_with_a_hint(demo_dir: Path, tmp_path: Path):
    agent_dir = tmp_path / "agent"
    shutil.copytree(demo_dir / "agent", agent_dir)
    state_path = agent_dir / ".lousho" / "state.json"
    state = json.loads(state_path.read_text())
    state["watched"] = {"before": "0" * 16, "after": "f" * 16, "applied_at": datetime.now(UTC).isoformat(),
                        "status": "monitoring"}
    state_path.write_text(json.dumps(state))
    result = plot("monitor", agent_dir, "--db", demo_dir / "observe.duckdb", "--out", tmp_path / "m.png")
    assert_clean_error(result, 1, "LOUSHO_PLOT_NO_RUNS")
    assert "--revision " in result.stderr  # points at the edit the monitor did judge
    assert not (tmp_path / "m.png").exists()


@pytest.mark.slow
@pytest.mark.system
def test_plot_monitor_of_a_revision_never_applied_is_a_usage_error(demo_dir: Path, tmp_path: Path):
    result = plot("monitor", demo_dir / "agent", "--revision", "deadbeef", "--db", demo_dir / "observe.duckdb",
                  "--out", tmp_path / "m.png")
    assert_clean_error(result, 2, "LOUSHO_PLOT_NO_WATCHED_EDIT")
    assert judged_revision(demo_dir / "agent") in result.stderr  # the message lists the applied revisions


@pytest.mark.slow
@pytest.mark.system
def test_plot_pass_rate_of_an_unknown_agent_is_a_usage_error_naming_the_known_ones(demo_dir: Path, tmp_path: Path):
    agent = tomllib.loads((demo_dir / "agent" / "agent.toml").read_text())["name"]
    result = plot("pass-rate", "--agent", "no-such-agent", "--db", demo_dir / "observe.duckdb",
                  "--out", tmp_path / "p.png")
    assert_clean_error(result, 2, "LOUSHO_PLOT_UNKNOWN_AGENT")
    assert f"agents with live runs: {agent}" in result.stderr


def test_plot_monitor_of_an_agent_never_improved_is_a_usage_error(tmp_path: Path):
    agent_dir = tmp_path / "agent"
    shutil.copytree(EXAMPLE_AGENT, agent_dir, ignore=shutil.ignore_patterns("__pycache__", "workspace"))
    result = plot("monitor", agent_dir, "--db", tmp_path / "none.duckdb", "--out", tmp_path / "m.png")
    assert_clean_error(result, 2, "LOUSHO_PLOT_NO_WATCHED_EDIT")


def test_plot_refuses_an_unknown_image_suffix_before_reading_any_store(tmp_path: Path):
    result = plot("pass-rate", "--agent", "a", "--db", tmp_path / "missing.duckdb", "--out", tmp_path / "p.gif")
    assert_clean_error(result, 2, "LOUSHO_PLOT_BAD_OUTPUT")


def test_plot_from_a_missing_store_fails_with_the_observe_code(tmp_path: Path):
    result = plot("pass-rate", "--agent", "a", "--db", tmp_path / "missing.duckdb", "--out", tmp_path / "p.png")
    assert_clean_error(result, 1, "LOUSHO_STORE_MISSING")


def test_the_pass_rate_band_is_pass_rates_interval_on_the_runs_so_far() -> None:
    """Each run's band is what ``pass_rates`` gives on the revision's scored runs up to it: clustered by session,
    else case, else run, computed run by run from the clusters' power sums."""
    import polars as pl

    from lousho.analysis.frames import pass_rates
    from lousho.plot.pass_rate_plot import NO_REVISION, pass_rate_paths

    rng = np.random.default_rng(1)
    n = 300
    frame = pl.DataFrame({
        "run_id": [f"r{i:03d}" for i in range(n)], "started_ns": np.arange(n),
        "harness_revision": rng.choice(np.array(["a", "b", None], dtype=object), n).tolist(),
        "conversation_id": [f"s{i // 3}" if i % 4 else None for i in range(n)],
        "case_id": [f"c{i % 7}" if i % 3 else None for i in range(n)],
        "passed": [None if v == 2 else bool(v) for v in rng.integers(0, 3, n)],
        "input_tokens": [1] * n, "output_tokens": [1] * n, "cost_usd": [None] * n,
    }, schema_overrides={"cost_usd": pl.Float64})
    paths = pass_rate_paths(frame)
    scored = frame.filter(pl.col("passed").is_not_null()).with_columns(
        harness_revision=pl.col("harness_revision").fill_null(NO_REVISION))
    for revision in ("a", "b", NO_REVISION):
        mine, runs = paths.filter(pl.col("harness_revision") == revision), scored.filter(
            pl.col("harness_revision") == revision)
        for upto in (5, 17, runs.height):
            [expected] = pass_rates(runs.head(upto), k=1).iter_rows(named=True)
            row = mine.row(upto - 1, named=True)
            assert (row["ci_low"], row["ci_high"]) == pytest.approx((expected["ci_low"], expected["ci_high"]),
                                                                    abs=1e-9), (revision, upto)


@pytest.mark.parametrize(("design", "held_back", "rate"), [("concurrent", True, 0.75), ("concurrent", False, 0.75),
                                                         ("concurrent", True, 0.9), ("seed", False, 0.75)])
def test_the_plotted_path_at_the_deciding_look_is_the_watchers_z(design, held_back, rate, monkeypatch):
    """`lousho plot monitor` draws the statistic of the design that decides (the concurrent design fallen back to
    stratified when no session was held back) and its point at the deciding look is the live monitor's z."""
    from lousho.analysis import traffic_model
    from lousho.analysis.live_monitor import Monitor
    from lousho.analysis.monitor import MonitorConfig
    from lousho.plot.monitor_plot import draw_monitor, monitor_path

    # The stated rates are simulated (a second each) and only printed in the title: not what is compared here.
    monkeypatch.setattr(traffic_model, "stated_rates", lambda *args, **kwargs: (0.0, 0.0))
    con = watch(5, held_back=held_back, applied_rate=rate)
    config, now = MonitorConfig(design=design), APPLIED_AT + timedelta(hours=1)
    monitor = monitor_path(DuckStore(con), AGENT, EDIT, config, now=now)
    watcher = Monitor(DuckStore(con), AGENT, EDIT.before, EDIT.after, APPLIED_AT, config).check(now)
    fields = ("action", "design", "look", "runs", "applied_runs", "base_passes", "applied_passes", "z", "bound",
              "reason", "false_alarm", "power")
    assert [getattr(monitor.decision, f) for f in fields] == [getattr(watcher, f) for f in fields]
    ran = design if held_back or design == "seed" else "stratified"
    assert monitor.path.design == watcher.design == ran
    figure = draw_monitor(monitor)
    axes = figure.axes[1]
    line = next(line for line in axes.get_lines() if line.get_gid() == "statistic")
    x, y = list(line.get_xdata()), list(line.get_ydata())
    assert y[x.index(watcher.runs)] == watcher.z  # the same float
    looks = next(c for c in axes.collections if c.get_gid() == "looks").get_offsets()
    assert watcher.z in looks[:, 1] and watcher.runs in looks[:, 0]
    assert line.get_label() == monitor.path.statistic
    assert {"concurrent": "session-clustered z", "stratified": "case-stratified z", "seed": "pooled z"}[ran] in \
        line.get_label() and axes.get_ylabel() in line.get_label()
    assert monitor.path.design_label in figure.get_suptitle()
