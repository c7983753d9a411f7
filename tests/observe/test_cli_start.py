"""Commands that only talk to the daemon load only what talking to it needs (issue 15: they start in
≤ 0.3 s): click, urllib, and Polars to list runs as JSON; no DuckDB, no pyarrow and NumPy, no OTel SDK, no rich
for JSON, not the agent or recover loops that other parts add to `lousho runs`. Which modules load is checked,
not a timing (docs/performance.md has the times)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lousho.observe import instrument
from lousho.observe.client.workload import WorkloadPlan, emit_runs

# What a daemon-only command must not import (each costs 0.05-0.3 s of start-up on this machine).
HEAVY = ("duckdb", "pyarrow", "numpy", "opentelemetry.sdk", "grpc", "scipy", "starlette", "uvicorn",
         "lousho.agent", "lousho.recover", "lousho.models", "lousho.improve", "lousho.analysis",
         "lousho.observe.store.span_store", "lousho.observe.sql.query")

_PROBE = """
import json, sys
from lousho.cli import group
from lousho.kernel.cli_support import run
try:
    run(group, sys.argv[1:], prog_name="lousho")
except SystemExit:
    pass
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))),
      file=sys.stderr)
"""


def loaded(*args: str, also: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The command's stdout, and which of HEAVY (and ``also``) it loaded."""
    out = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY + also), *args], capture_output=True,
                         text=True, timeout=120)
    return out.stdout, json.loads(out.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def url(shared_daemon) -> str:
    provider = instrument("start-test", shared_daemon.url)
    emit_runs(provider, WorkloadPlan(runs=6, seed=5, fail_rate=0.5))
    provider.shutdown()
    return shared_daemon.url


@pytest.mark.system
def test_sql_over_the_daemon_loads_neither_duckdb_nor_pyarrow_nor_polars_nor_rich_for_json(url):
    out, heavy = loaded("sql", "--url", url, "--json", "SELECT count(*) AS n FROM runs", also=("rich", "polars"))
    assert json.loads(out) == [{"n": 6}]
    assert heavy == []


@pytest.mark.system
def test_sql_over_the_daemon_prints_every_type_as_the_json_answer_maps_it(url):
    """The daemon maps the values (sql_json); the CLI prints its answer, in each format, without pyarrow."""
    query = ("SELECT INTERVAL 3 DAY AS i, [1, 2] AS l, 1 AS a, 2 AS a, {'k': 'v'} AS s, NULL AS n, "
             "DATE '2020-01-02' AS d, 12.50::DECIMAL(9, 2) AS m, 'x'::BLOB AS b")
    out, heavy = loaded("sql", "--url", url, "--json", query)
    assert json.loads(out) == [{"i": {"months": 0, "days": 3, "micros": 0}, "l": [1, 2], "a": 1, "a_2": 2,
                                "s": {"k": "v"}, "n": None, "d": "2020-01-02", "m": "12.50", "b": "eA=="}]
    assert heavy == []
    out, heavy = loaded("sql", "--url", url, query)
    assert "1 row" in out and "2020-01-02" in out and heavy == []
    # CSV (for bulk exports) is written by the daemon: the CLI prints its bytes and loads neither pyarrow nor
    # Polars.
    out, heavy = loaded("sql", "--url", url, "--csv", query, also=("polars",))
    assert out.splitlines() == ["i,l,a,a,s,n,d,m,b",
                                '"{""months"": 0, ""days"": 3, ""micros"": 0}","[1, 2]",1,2,"{""k"": ""v""}",,'
                                "2020-01-02,12.50,eA=="]
    assert heavy == []


@pytest.mark.system
def test_runs_over_the_daemon_loads_polars_only_for_json_and_never_pyarrow_nor_the_parts_that_add_sub_commands(url):
    out, heavy = loaded("runs", "--url", url, "--failed", "--limit", "50", "--json", also=("rich",))
    runs = json.loads(out)
    assert runs and all(run["agent"] for run in runs)
    assert heavy == []
    # The table prints the daemon's JSON answer, as `lousho sql` does: no Polars (a third of the start-up).
    out, heavy = loaded("runs", "--url", url, "--limit", "3", also=("polars",))
    assert "3 rows" in out
    assert heavy == []
    run_id = runs[0]["run_id"]
    out, heavy = loaded("runs", "--url", url, "show", run_id, "--json")
    assert json.loads(out)["run"]["run_id"] == run_id
    assert heavy == []


@pytest.mark.system
def test_the_sub_commands_other_parts_add_to_runs_still_run_and_show_their_help():
    out, heavy = loaded("runs", "pending", "--help")
    assert "unfinished run" in out and "lousho.recover.cli" in heavy
    out, _ = loaded("runs", "--help")
    assert all(name in out for name in ("pending", "outage", "resume", "approve", "show"))


# A daemon serving until its first SIGTERM, in the probe's own process: which modules its start loaded.
_DAEMON_PROBE = """
import json, os, signal, sys, threading
from lousho.cli import group
from lousho.kernel.cli_support import run

ready = threading.Event()


class Watched:
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if "lousho observe ready" in text:
            ready.set()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


sys.stdout = Watched(sys.stdout)
threading.Thread(target=lambda: ready.wait(60) and os.kill(os.getpid(), signal.SIGTERM), daemon=True).start()
run(group, ["observe", "--db", sys.argv[1], "--port", "0", "--grpc-port", "0"], prog_name="lousho")
late = {late!r}
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in late))),
      file=sys.stderr)
"""


@pytest.mark.system
def test_a_daemon_without_a_lake_starts_without_the_price_table_psycopg_or_polars(tmp_path):
    """They load where first used (a span to price, a lake, a JSON answer): a sixth of a second to a quarter of
    a start's CPU (docs/performance.md, "Daemon start-up")."""
    late = ("genai_prices", "pydantic", "psycopg", "polars")
    out = subprocess.run([sys.executable, "-c", _DAEMON_PROBE.format(late=late), str(tmp_path / "o.duckdb")],
                         capture_output=True, text=True, timeout=120)
    assert "lousho observe ready" in out.stdout, out.stdout + out.stderr
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []


def test_improve_status_reads_its_files_without_loading_the_loops_statistics(tmp_path):
    """status prints the loop's files: not the gate and its SciPy, nor the agent's loop (1.05 s before, 0.17 s)."""
    harness = tmp_path / "harness"
    (harness / "skills" / "refunds").mkdir(parents=True)
    (harness / "instructions.md").write_text("You answer support questions.\n")
    (harness / "skills" / "refunds" / "SKILL.md").write_text("---\ndescription: refunds\n---\nRefund.\n")
    out, heavy = loaded("improve", "status", str(harness), "--json", also=("lousho.improve.gate",))
    assert len(json.loads(out)["revision"]) == 16
    assert [m for m in heavy if m.startswith(("scipy", "lousho.improve.gate", "lousho.agent.loop"))] == []


def test_improve_reject_decides_without_loading_the_step_the_corpus_or_the_gate(tmp_path):
    """reject and rollback only move files: the step, the corpus and the gate are imported where runs are made
    (the command took 0.52-0.63 s with them, 0.35-0.42 s without)."""
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "instructions.md").write_text("You answer support questions.\n")
    out, heavy = loaded("improve", "reject", str(harness), "no-such-proposal",
                        also=("lousho.improve.gate", "lousho.improve.step", "lousho.improve.corpus",
                              "lousho.improve.cycle"))
    assert out == "" and "lousho.improve.cycle" in heavy  # it ran: no such proposal, a coded error on stderr
    assert [m for m in heavy if m.startswith(("lousho.improve.gate", "lousho.improve.step",
                                              "lousho.improve.corpus"))] == []
