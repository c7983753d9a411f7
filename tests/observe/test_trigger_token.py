"""A daemon started with --token hands its token to the improvement cycles it starts (as LOUSHO_TOKEN
in the cycle's environment, never on its command line), so a triggered cycle reads its own daemon; the
token shows up in no log."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_runs import emit_run
from daemon_support import sql

import lousho.agent
from lousho.observe import instrument
from lousho.observe.process import start_daemon
from lousho.observe.trigger import AgentSpec, TriggerConfig, cycle_command, cycle_environment

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


@pytest.mark.system
@pytest.mark.slow
def test_a_cycle_triggered_by_a_daemon_with_a_token_reads_that_daemon(tmp_path: Path):
    agent, check = make_agent(tmp_path)
    seen = tmp_path / "seen.txt"
    # The daemon's own environment holds no token: only --token gives it one.
    daemon = start_daemon(tmp_path / "o.duckdb", "--token", TOKEN, "--agent", f"coder={agent}:{check}",
                          "--trigger-interval", "0.1", env={"LOUSHO_IMPROVE": "on", "LOUSHO_TOKEN": ""})
    provider = instrument("coder", daemon.url, token=TOKEN)
    try:
        for i in range(40):
            emit_run(provider, f"run-{i}", outcome="pass" if i < 20 else "fail", case=None if i < 20 else "sums")
        assert provider.force_flush()
        auth = {"authorization": f"Bearer {TOKEN}"}
        wait_for(lambda: sql(daemon.url, "SELECT count(*) AS n FROM runs", **auth)[0]["n"] == 40, "the runs")
        trigger_log = agent / ".lousho" / "trigger.jsonl"
        wait_for(lambda: trigger_log.exists() and '"started"' in trigger_log.read_text(), "the cycle to start")
        wait_for(lambda: any("cycle of agent coder" in line and "exited" in line for line in daemon.output),
                 "the cycle to end")
        [cycle_log] = (agent / ".lousho" / "cycles").iterdir()
        log = cycle_log.read_text()
        assert "LOUSHO_OBSERVE_UNAUTHORIZED" not in log, log
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
    # A daemon without a token passes none on, not even one left in its environment.
    assert cycle_environment({"PATH": "/bin", "LOUSHO_TOKEN": "stale"}, None) == {"PATH": "/bin"}
