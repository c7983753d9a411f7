"""``make demo``: the main job on the embedded default, end to end, on a fresh store."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click

from lousho.observe.export import instrument
from lousho.observe.process import start_daemon
from lousho.observe.workload import WorkloadPlan, emit_runs


@click.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path), default=Path(".lousho/demo"),
              show_default=True, help="Where the demo keeps its store (emptied first).")
@click.option("--runs", "n_runs", type=click.IntRange(min=1), default=300, show_default=True)
def demo(workdir: Path, n_runs: int) -> None:
    """Daemon, a synthetic agent workload through the OTel SDK, then the store answers."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    db = workdir / "observe.duckdb"
    _say(f"1. starting the observe daemon on a fresh store: {db}")
    daemon = start_daemon(db)
    try:
        _say(f"   listening on {daemon.url} (OTLP/HTTP + SQL) and {daemon.grpc_target} (OTLP/gRPC)")
        _say(f"2. {n_runs} agent runs through the OpenTelemetry SDK (invoke_agent, chat, "
             "execute_tool spans, pass/fail scores)")
        provider = instrument("demo-agent", daemon.url)
        summary = emit_runs(provider, WorkloadPlan(runs=n_runs))
        provider.shutdown()
        _say(f"   sent {summary.spans} spans: {summary.failed} runs failed their check, "
             f"{summary.errored} errored")
        _say("3. lousho runs --failed --limit 10")
        _lousho("runs", "--url", daemon.url, "--failed", "--limit", "10")
        _say("4. lousho sql: pass rate and tokens by agent and harness revision")
        _lousho(
            "sql", "--url", daemon.url,
            "SELECT agent, harness_revision, count(*) AS runs, "
            "round(avg(passed::INT), 3) AS pass_rate, sum(input_tokens + output_tokens) AS tokens "
            "FROM runs GROUP BY ALL ORDER BY ALL",
        )
    finally:
        code = daemon.stop()
    _say(f"5. daemon stopped with SIGTERM: drained, committed, exit code {code}")
    if code != 0:
        raise SystemExit(code)
    _say(f"done. The store stays at {db}: `lousho sql --db {db} \"SELECT * FROM runs LIMIT 5\"`")


def _lousho(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lousho", *args], check=True)


def _say(text: str) -> None:
    click.secho(text, bold=text[:1].isdigit())
