"""`lousho sql`, `lousho runs` and `lousho runs show` over a daemon or a file; errors exit 1, usage 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.client.workload import WorkloadPlan, emit_runs


def lousho(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    db = tmp_path_factory.mktemp("cli") / "o.duckdb"
    daemon = start_daemon(db)
    provider = instrument("cli-test", daemon.url)
    summary = emit_runs(provider, WorkloadPlan(runs=60, seed=11))
    provider.shutdown()
    yield daemon, summary
    assert daemon.stop() == 0


@pytest.mark.system
def test_sql_json_is_one_array_of_row_objects(filled):
    daemon, summary = filled
    out = lousho("sql", "--url", daemon.url, "--json", "SELECT count(*) AS runs FROM runs")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"runs": summary.runs}]
    out = lousho("sql", "--url", daemon.url, "--csv", "SELECT 1 AS a, 'x' AS b")
    assert out.stdout.splitlines() == ["a,b", "1,x"]
    out = lousho("sql", "--url", daemon.url, "SELECT agent, count(*) AS n FROM runs GROUP BY ALL ORDER BY 1")
    assert "coder" in out.stdout and "triage" in out.stdout


@pytest.mark.system
def test_runs_failed_json_lists_exactly_the_failed_runs(filled):
    daemon, summary = filled
    out = lousho("runs", "--url", daemon.url, "--failed", "--limit", "1000", "--json")
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)
    assert len(runs) == summary.failed + summary.errored
    for run in runs:
        assert {"run_id", "agent", "harness_revision", "status", "passed"} <= run.keys()
        assert run["status"] == "error" or run["passed"] is False
    only = json.loads(lousho("runs", "--url", daemon.url, "--agent", "triage", "--limit", "5", "--json").stdout)
    assert len(only) == 5 and {r["agent"] for r in only} == {"triage"}


@pytest.mark.system
def test_runs_show_prints_the_span_tree_and_scores(filled):
    daemon, summary = filled
    failed = json.loads(lousho("runs", "--url", daemon.url, "--failed", "--json").stdout)
    run_id = next(r["run_id"] for r in failed if r["passed"] is False)
    out = lousho("runs", "--url", daemon.url, "show", run_id)
    assert out.returncode == 0, out.stderr
    assert "invoke_agent" in out.stdout and "execute_tool" in out.stdout
    assert "failed check: test_rounding" in out.stdout
    doc = json.loads(lousho("runs", "--url", daemon.url, "show", run_id, "--json").stdout)
    assert doc["run"]["run_id"] == run_id
    assert doc["scores"][0]["passed"] is False
    assert doc["spans"][0]["parent_span_id"] is None


@pytest.mark.system
def test_cli_reads_the_file_directly_when_the_daemon_is_stopped(tmp_path):
    db = tmp_path / "o.duckdb"
    daemon = start_daemon(db)
    provider = instrument("cli-file", daemon.url)
    emit_runs(provider, WorkloadPlan(runs=10, seed=2))
    provider.shutdown()
    assert daemon.stop() == 0
    out = lousho("sql", "--db", str(db), "--json", "SELECT count(*) AS n FROM runs")
    assert json.loads(out.stdout) == [{"n": 10}]
    out = lousho("sql", "--db", str(db), "INSERT INTO spans SELECT * FROM spans")
    assert out.returncode == 1 and "LOUSHO_SQL_REFUSED" in out.stderr


@pytest.mark.system
def test_errors_print_one_clear_line_and_exit_1(filled, tmp_path):
    daemon, _ = filled
    out = lousho("sql", "--url", "http://127.0.0.1:9", "SELECT 1")
    assert out.returncode == 1
    assert "LOUSHO_OBSERVE_UNREACHABLE" in out.stderr and "Traceback" not in out.stderr
    out = lousho("sql", "--url", daemon.url, "SELECT * FROM nosuch")
    assert out.returncode == 1 and "LOUSHO_SQL_FAILED" in out.stderr and "nosuch" in out.stderr
    out = lousho("sql", "--url", daemon.url, "DROP TABLE spans")
    assert out.returncode == 1 and "LOUSHO_SQL_REFUSED" in out.stderr
    out = lousho("runs", "--url", daemon.url, "show", "no-such-run")
    assert out.returncode == 1 and "LOUSHO_RUN_NOT_FOUND" in out.stderr
    out = lousho("sql", "--db", str(tmp_path / "missing.duckdb"), "SELECT 1")
    assert out.returncode == 1 and "LOUSHO_STORE_MISSING" in out.stderr
    out = lousho("sql", cwd=tmp_path)  # the driven query is missing
    assert out.returncode == 2
    out = lousho("runs", "--url", daemon.url, "--limit", "0")
    assert out.returncode == 2
    out = lousho("sql", "--url", daemon.url, "--db", "x", "SELECT 1")
    assert out.returncode == 2


@pytest.mark.system
def test_a_wrong_address_says_what_it_is_not_a_traceback(filled):
    daemon, _ = filled
    # The gRPC port speaks HTTP/2 only: the HTTP/1.1 client reads a bad status line.
    out = lousho("sql", "--url", f"http://{daemon.grpc_target}", "SELECT 1")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "LOUSHO_OBSERVE_ERROR" in out.stderr and "4317 is gRPC" in out.stderr
    out = lousho("sql", "--url", f"{daemon.url}/v1/sql", "SELECT 1")  # a path after the address: 404
    assert out.returncode == 1 and "answered HTTP 404" in out.stderr and "without a path" in out.stderr
    out = lousho("runs", "--url", daemon.url.removeprefix("http://"))
    assert out.returncode == 1 and f"hint: a daemon's address starts with its scheme: {daemon.url}" in out.stderr


@pytest.mark.system
def test_a_flag_typed_wins_over_the_other_target_s_variable(filled, tmp_path, monkeypatch):
    daemon, _ = filled
    monkeypatch.setenv("LOUSHO_DB", str(tmp_path / "elsewhere.duckdb"))
    out = lousho("sql", "--url", daemon.url, "--json", "SELECT 1 AS a")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"a": 1}]
    monkeypatch.delenv("LOUSHO_DB")
    monkeypatch.setenv("LOUSHO_URL", daemon.url)
    out = lousho("sql", "--db", str(tmp_path / "missing.duckdb"), "SELECT 1")
    assert out.returncode == 1 and "LOUSHO_STORE_MISSING" in out.stderr  # --db was used, not the variable


def test_a_token_no_header_can_carry_is_refused_at_start(tmp_path):
    (tmp_path / "space.tok").write_text("s3cret \n")
    (tmp_path / "two.tok").write_text("s3cret\nsecond\n")
    db = tmp_path / "o.duckdb"
    out = lousho("observe", "--db", str(db), "--port", "0", "--grpc-port", "-1", "--token-file",
                 str(tmp_path / "two.tok"))
    assert out.returncode == 2 and "LOUSHO_OBSERVE_TOKEN_FILE" in out.stderr and "second line" in out.stderr
    from lousho.observe.client.cli import read_token_file

    assert read_token_file(tmp_path / "space.tok") == "s3cret"  # what a client can send, both ends alike


@pytest.mark.parametrize(("how", "token"), [("flag", " "), ("env", "  "), ("env", "tok en "), ("flag", "tok-Ünï-123"),
                                            ("file", "tok-Ünï-123"), ("env", "tok\ten")])
def test_a_token_some_client_cannot_send_is_refused_at_start(tmp_path, monkeypatch, how, token):
    """A blank token locked every client out; a non-ASCII one worked over HTTP and failed every gRPC export."""
    args = ["observe", "--db", str(tmp_path / "o.duckdb"), "--port", "0", "--grpc-port", "-1"]
    if how == "flag":
        args += ["--token", token]
    elif how == "env":
        monkeypatch.setenv("LOUSHO_TOKEN", token)
    else:
        (tmp_path / "t.tok").write_text(token + "\n", encoding="utf-8")
        args += ["--token-file", str(tmp_path / "t.tok")]
    out = lousho(*args)
    assert out.returncode == 2 and "LOUSHO_OBSERVE_BAD_TOKEN" in out.stderr, out.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_a_token_with_a_space_inside_or_base64_signs_is_sendable():
    from lousho.observe.client.cli import sendable_token
    from lousho.observe.receive.http_layers import bearer_matches

    for token in ("correct horse battery", "a+b/c=="):
        assert sendable_token(token, "t") == token and bearer_matches(f"Bearer {token}", token.encode())


@pytest.mark.parametrize("flags", [("--max-body-mib", "-1"), ("--max-body-mib", "0"), ("--port", "70000"),
                                   ("--grpc-port", "-5"), ("--queue-mib", "-1"), ("--sql-timeout", "0")])
def test_a_daemon_option_out_of_range_is_a_usage_error_before_the_store_is_made(tmp_path, flags):
    db = tmp_path / "o.duckdb"
    out = lousho("observe", "--db", str(db), *flags)
    assert out.returncode == 2 and "is not in the range" in out.stderr and "Traceback" not in out.stderr
    assert not db.exists()
