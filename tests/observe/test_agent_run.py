"""The agent-side run span for any agent: its runs reach the daemon with the agent's name, the harness revision
the loop uses, the case, input, output and verdict, through any OTel tracer provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_support import sql
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from lousho.agent import Verdict
from lousho.cli import run
from lousho.improve.cli import improve
from lousho.observe import agent_run, instrument
from lousho.observe.client.process import DaemonProcess


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    (tmp_path / "h" / "skills" / "orders").mkdir(parents=True)
    (tmp_path / "h" / "instructions.md").write_text("Answer order questions.\n")
    (tmp_path / "h" / "skills" / "orders" / "SKILL.md").write_text("---\ndescription: orders\n---\nLook up.\n")
    return tmp_path / "h"


def runs_of(url: str, agent: str) -> list[dict]:
    return sql(url, "SELECT run_id, agent, harness_revision, case_id, status, passed, input, output, probe "
                    "FROM runs WHERE agent = ? ORDER BY run_id", [agent])


@pytest.mark.system
def test_runs_carry_the_revision_improve_revision_prints(shared_daemon: DaemonProcess, harness: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    provider = instrument("desk", shared_daemon.url, batch=False)
    with agent_run("desk-a", harness=harness, input="where is A-1?", case_id="a1", run_id="r1",
                   tracer_provider=provider) as r:
        r.output("A-1 has shipped.")
        r.verdict(Verdict("pass"))
    with agent_run("desk-a", harness=harness, input="where is B-2?", run_id="r2", probe=True,
                   tracer_provider=provider) as r:
        r.output("no idea")
        r.verdict(False, failed_check="names-status")
    provider.shutdown()
    run(improve, ["revision", str(harness)])
    revision = capsys.readouterr().out.strip()
    rows = runs_of(shared_daemon.url, "desk-a")
    assert [(x["run_id"], x["harness_revision"], x["case_id"], x["passed"], x["probe"]) for x in rows] == [
        ("r1", revision, "a1", True, False), ("r2", revision, None, False, True)]
    assert "where is A-1?" in rows[0]["input"] and "A-1 has shipped." in rows[0]["output"]
    failed = sql(shared_daemon.url, "SELECT failed_check FROM scores WHERE passed = false AND trace_id IN "
                                    "(SELECT trace_id FROM spans WHERE run_id = 'r2')")
    assert failed == [{"failed_check": "names-status"}]


@pytest.mark.system
def test_any_tracer_provider_and_an_error_in_the_run(shared_daemon: DaemonProcess, harness: Path) -> None:
    provider = TracerProvider()  # the user's own provider and exporter, not lousho's instrument()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{shared_daemon.url}/v1/traces")))
    with pytest.raises(ConnectionError), agent_run("desk-b", harness=harness, input="hi", run_id="e1",
                                                   tracer_provider=provider):
        raise ConnectionError("the model is unreachable")
    provider.shutdown()
    [row] = runs_of(shared_daemon.url, "desk-b")
    assert (row["run_id"], row["status"], row["passed"]) == ("e1", "error", None)
    assert row["harness_revision"] is not None


def test_a_directory_that_is_no_harness_costs_the_revision_not_the_run(tmp_path: Path) -> None:
    provider = TracerProvider()
    with agent_run("desk-c", harness=tmp_path / "missing", tracer_provider=provider) as r:
        r.output("still answered")
    assert r.revision is None and r.run_id.startswith("run-")


@pytest.mark.system
def test_a_run_carries_its_session_and_the_arm_the_router_gave_it(shared_daemon: DaemonProcess, harness: Path) -> None:
    # An agent of your own under the monitor's holdback: route(DIR, session) picks the directory and the arm.
    provider = instrument("desk", shared_daemon.url, batch=False)
    with agent_run("desk-s", harness=harness, input="where is C-3?", run_id="s1", session_id="chat-7",
                   traffic_arm="base", tracer_provider=provider) as r:
        r.output("C-3 is late.")
    provider.shutdown()
    assert sql(shared_daemon.url, "SELECT conversation_id, traffic_arm FROM runs WHERE agent = 'desk-s'") == [
        {"conversation_id": "chat-7", "traffic_arm": "base"}]
