"""A daemon started with --token hands its token to the improvement cycles it starts (as LOUSHO_TOKEN
in the cycle's environment, never on its command line), and a daemon on TLS its certificate (as
LOUSHO_CA_CERT), so a triggered cycle reads its own daemon; the token shows up in no log."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_runs import emit_run

import lousho.agent
from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.client.store_client import DaemonClient
from lousho.observe.trigger.cycle import AgentSpec, TriggerConfig, cycle_command, cycle_environment

TOKEN = "s3cret-trigger-token-1f2e"
EXAMPLE = Path(lousho.agent.__file__).parent / "example"

# No cases of its own: every training case of the cycle comes from the daemon's failed runs (recurring
# ones, as an auto cycle learns only from those). The probe writes down the input of each case it is
# given, which proves the cycle read them from the daemon.
CHECK = '''
from pathlib import Path

from lousho.agent import Verdict
from lousho.improve.records import RunRecord

SEEN = Path(__file__).with_name("seen.txt")


def check(input_text, output):
    return Verdict("pass")


def probe(harness_dir, case, repeat):
    with SEEN.open("a", encoding="utf-8") as f:
        f.write(case.input + "\\n")
    return RunRecord(case.id, "probe", repeat, "cannot-score", error="this probe only records its cases")
'''


def make_agent(root: Path) -> tuple[Path, Path]:
    agent = root / "coder"
    shutil.copytree(EXAMPLE, agent, ignore=shutil.ignore_patterns("__pycache__", "workspace", "model.py", "check.py"))
    (agent / "agent.toml").write_text('name = "coder"\nmodel = "scripted"\nmax_steps = 4\n', encoding="utf-8")
    check = root / "check.py"
    check.write_text(CHECK, encoding="utf-8")
    return agent, check


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_cycle_triggered_by_a_daemon_with_a_token_reads_that_daemon(tmp_path: Path, scheme: str, monkeypatch):
    agent, check = make_agent(tmp_path)
    seen = tmp_path / "seen.txt"
    tls: tuple[str, ...] = ()
    cert = None
    if scheme == "https":
        cert, key = self_signed(tmp_path)
        tls = ("--tls-cert", str(cert), "--tls-key", str(key))
        # requests would trust this bundle instead of the exporter's certificate file.
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    # The daemon's own environment holds neither token nor CA: only its flags give them.
    daemon = start_daemon(tmp_path / "o.duckdb", "--token", TOKEN, *tls, "--agent", f"coder={agent}:{check}",
                          "--trigger", "seed", "--trigger-interval", "0.1",
                          env={"LOUSHO_IMPROVE": "on", "LOUSHO_TOKEN": "", "LOUSHO_CA_CERT": ""})
    assert daemon.url.startswith(f"{scheme}://")
    provider = instrument("coder", daemon.url, token=TOKEN, ca_cert=cert)
    client = DaemonClient(daemon.url, token=TOKEN, ca_cert=cert)
    try:
        for i in range(40):
            emit_run(provider, f"run-{i}", outcome="pass" if i < 20 else "fail", case=None if i < 20 else "sums")
        assert provider.force_flush()
        wait_for(lambda: client.sql("SELECT count(*) AS n FROM runs")["n"][0] == 40, "the runs")
        trigger_log = agent / ".lousho" / "trigger.jsonl"
        wait_for(lambda: trigger_log.exists() and '"started"' in trigger_log.read_text(), "the cycle to start")
        wait_for(lambda: any("cycle of agent coder" in line and "exited" in line for line in daemon.output),
                 "the cycle to end")
        [cycle_log] = (agent / ".lousho" / "cycles").iterdir()
        log = cycle_log.read_text()
        assert "LOUSHO_OBSERVE_UNAUTHORIZED" not in log and "LOUSHO_OBSERVE_UNREACHABLE" not in log, log
        # The cycle's training cases are the daemon's failed runs, read with the daemon's token.
        assert seen.exists(), log
        assert set(seen.read_text().splitlines()) == {"input of sums"}, log
    finally:
        provider.shutdown()
        assert daemon.stop() == 0
    for text in (log, trigger_log.read_text(), "\n".join(daemon.output)):
        assert TOKEN not in text


def test_the_token_goes_by_the_environment_never_the_command_line(tmp_path: Path):
    spec = AgentSpec("coder", tmp_path, tmp_path / "check.py")
    assert TOKEN not in " ".join(cycle_command(spec, "http://127.0.0.1:1"))
    assert TOKEN not in repr(TriggerConfig(agents=(spec,), observe_token=TOKEN))
    env = cycle_environment({"PATH": "/bin", "LOUSHO_TOKEN": "stale"}, TOKEN)
    assert env == {"PATH": "/bin", "LOUSHO_TOKEN": TOKEN}
    # A daemon without a token passes none on, not even one left in its environment; nor a stale CA.
    assert cycle_environment({"PATH": "/bin", "LOUSHO_TOKEN": "stale", "LOUSHO_CA_CERT": "/old.pem"}, None) \
        == {"PATH": "/bin"}
    assert cycle_environment({"PATH": "/bin"}, None, tmp_path / "cert.pem") \
        == {"PATH": "/bin", "LOUSHO_CA_CERT": str((tmp_path / "cert.pem").resolve())}
