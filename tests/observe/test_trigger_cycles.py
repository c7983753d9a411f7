"""The trigger, configurable and honest: --agent is checked at start, the cycle's models come from the daemon's
flags, each cycle ends in one log line with its outcome, and a cycle that failed before its step (the editor
model unreachable) is retried for the same regression until it gets through."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_runs import emit_run
from daemon_support import get, sql

import lousho
from lousho.models.scripted import ScriptedModelServer
from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.trigger.cycle import AgentSpec, CycleModels, cycle_command, cycle_outcome

sys.path.insert(0, str(Path(__file__).parents[1] / "improve"))
from improve_support import HARNESS_ONLY_CHECK, SIGN_FIX, editor_script  # noqa: E402  (tests/improve's scripted editor)

FIX, CHECK = SIGN_FIX, HARNESS_ONLY_CHECK


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    (tmp_path / "desk").mkdir()
    (tmp_path / "desk" / "instructions.md").write_text("You answer support questions.\n")
    (tmp_path / "check.py").write_text(CHECK)
    return tmp_path / "desk"


def observe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", "observe", "--port", "0", "--grpc-port", "-1", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.system
@pytest.mark.parametrize(("agent", "code", "says"), [
    ("x=/nonexistent:{check}", "LOUSHO_OBSERVE_BAD_AGENT", "the agent directory /nonexistent does not exist"),
    ("x={dir}:missing.py", "LOUSHO_OBSERVE_BAD_AGENT", "the check module missing.py does not exist"),
    ("x={empty}:{check}", "LOUSHO_OBSERVE_AGENT_DIR_INVALID", "instructions.md: missing"),
    ("x={dir}:{nocheck}", "LOUSHO_OBSERVE_AGENT_CHECK_INVALID", "defines no check(input, output) function"),
    ("x={dir}:{broken}", "LOUSHO_OBSERVE_AGENT_CHECK_INVALID", "ZeroDivisionError"),
])
def test_a_bad_agent_exits_2_at_start_with_a_code_and_a_hint(harness: Path, tmp_path: Path, agent: str, code: str,
                                                             says: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "nocheck.py").write_text("def probe(harness_dir, case, repeat):\n    return 'x'\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    value = agent.format(check=tmp_path / "check.py", dir=harness, empty=tmp_path / "empty",
                         nocheck=tmp_path / "nocheck.py", broken=tmp_path / "broken.py")
    done = observe("--db", str(tmp_path / "o.duckdb"), "--agent", value)
    assert done.returncode == 2, done.stderr
    assert f"error {code}: " in done.stderr and says in done.stderr, done.stderr
    assert "\nhint: " in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
def test_a_check_module_that_imports_a_package_lousho_cannot_see_names_the_fix(harness: Path, tmp_path: Path) -> None:
    # The check module imports the agent's framework; the daemon imports it in lousho's own interpreter.
    (tmp_path / "framework_check.py").write_text("import agent_framework_absent_here\n\n"
                                                 "def check(input, output):\n    return True\n")
    done = observe("--db", str(tmp_path / "o.duckdb"), "--agent", f"x={harness}:{tmp_path / 'framework_check.py'}")
    assert done.returncode == 2, done.stderr
    assert "error LOUSHO_OBSERVE_AGENT_CHECK_INVALID: " in done.stderr
    assert "No module named 'agent_framework_absent_here'" in done.stderr and sys.executable in done.stderr
    hint = done.stderr.split("\nhint: ", 1)[1]
    assert "install lousho in the agent's environment" in hint and "docs/improve.md" in hint
    assert "Traceback" not in done.stderr and not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
@pytest.mark.parametrize(("flags", "env"), [
    (["--editor-model-url", "localhost:9/v1"], {}),
    ([], {"LOUSHO_EDITOR_MODEL_URL": "localhost:9/v1"}),
    ([], {"LOUSHO_MODEL_URL": "ftp://model/v1"}),
], ids=["flag", "editor-env", "model-env"])
def test_a_malformed_model_url_exits_2_at_start(harness: Path, tmp_path: Path, flags: list[str],
                                                env: dict[str, str]) -> None:
    done = observe("--db", str(tmp_path / "o.duckdb"), "--agent", f"x={harness}:{tmp_path / 'check.py'}", *flags,
                   env=env)
    assert done.returncode == 2 and "error LOUSHO_MODELS_CONFIG_INVALID: " in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_cycle_gets_the_daemons_models_and_its_agent_name(tmp_path: Path) -> None:
    spec = AgentSpec("desk", tmp_path, tmp_path / "check.py")
    command = cycle_command(spec, None, CycleModels("http://m:1/v1", "agent-m", "http://e:2/v1", "editor-m"))
    assert command[-12:] == ["--apply", "--json", "--agent-name", "desk", "--model-url", "http://m:1/v1",
                             "--model", "agent-m", "--editor-model-url", "http://e:2/v1", "--editor-model", "editor-m"]
    assert "--model" not in cycle_command(spec, None, CycleModels())


@pytest.mark.parametrize(("code", "log", "expected"), [
    (0, 'progress\n{"outcome": "applied", "reason": "applied abc", "proposal_id": "p-1", "code": null, '
        '"retry": false}\n', ("applied", None, "p-1", False, "proposal applied p-1: applied abc")),
    (1, '{"outcome": "error", "reason": "no model", "code": "LOUSHO_PROVIDER_TIMEOUT", "retry": true}\n',
     ("error", "LOUSHO_PROVIDER_TIMEOUT", None, True, "failed LOUSHO_PROVIDER_TIMEOUT: no model")),
    (2, "error LOUSHO_AGENT_DIR_INVALID: /x: not a directory\nhint: pass the harness directory\n",
     ("failed", "LOUSHO_AGENT_DIR_INVALID", None, True, "failed LOUSHO_AGENT_DIR_INVALID: /x: not a directory")),
    (1, "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n",
     ("failed", None, None, False, "failed (no code): exited with code 1")),
])
def test_a_cycles_outcome_is_read_from_its_log(code: int, log: str, expected: tuple) -> None:
    o = cycle_outcome(code, log)
    assert (o.outcome, o.code, o.proposal, o.retry, o.describe()) == expected


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def trigger_lines(harness: Path, action: str) -> list[dict]:
    path = harness / ".lousho" / "trigger.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["action"] == action]


@pytest.mark.system
@pytest.mark.slow
def test_a_cycle_that_met_an_unreachable_model_is_retried_and_applies_once_the_model_is_up(
        harness: Path, tmp_path: Path) -> None:
    port = free_port()
    editor_url = f"http://127.0.0.1:{port}/v1"  # nothing listens here yet
    revision = lousho.harness_revision(harness)
    daemon = start_daemon(tmp_path / "o.duckdb", "--agent", f"desk={harness}:{tmp_path / 'check.py'}",
                          "--trigger", "seed", "--trigger-interval", "0.1", "--cycle-retry", "1",
                          "--editor-model-url", editor_url, "--editor-model", "editor", env={"LOUSHO_IMPROVE": "on"})
    provider = instrument("desk", daemon.url)
    try:
        for i in range(40):
            emit_run(provider, f"run-{i}", agent="desk", revision=revision, outcome="pass" if i < 20 else "fail")
        assert provider.force_flush()
        wait_for(lambda: sql(daemon.url, "SELECT count(*) AS n FROM runs")[0]["n"] == 40, "the runs")
        wait_for(lambda: len(trigger_lines(harness, "finished")) >= 1, "the first cycle to end")
        first = trigger_lines(harness, "finished")[0]
        assert (first["outcome"], first["code"], first["retry"]) == ("error", "LOUSHO_IMPROVE_EDITORS_FAILED", True)
        assert "LOUSHO_PROVIDER_TIMEOUT" in Path(first["log"]).read_text()  # why: the editor model is down
        assert first["log"] in first["reason"]
        assert any("exited with code 1: failed LOUSHO_IMPROVE_EDITORS_FAILED" in line and first["log"] in line
                   for line in daemon.output), daemon.output[-10:]
        with ScriptedModelServer(editor_script({"invariant": [FIX]}), port=port):
            wait_for(lambda: any(r["outcome"] == "applied" for r in trigger_lines(harness, "finished")),
                     "a retried cycle to apply the fix")
        started = trigger_lines(harness, "started")
        assert len(started) >= 2 and {r["revision"] for r in started} == {revision}  # the same regression
        assert [r["attempt"] for r in started] == list(range(1, len(started) + 1))
        assert FIX in (harness / "instructions.md").read_text()
        assert any("proposal applied" in line for line in daemon.output), daemon.output[-10:]
        page = get(daemon.url, "/agents/desk").body.decode()
        assert 'id="cycles"' in page and "proposal applied" in page and "LOUSHO_IMPROVE_EDITORS_FAILED" in page
    finally:
        provider.shutdown()
        assert daemon.stop() == 0
