"""The regression trigger: a drop on a registered agent's live revision starts one improvement cycle,
once per revision; healthy agents, kill switches and bad --agent values start none."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_runs import emit_run
from daemon_support import get, sql

from lousho.kernel.cli_support import run
from lousho.observe import instrument
from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.daemon_cli import observe
from lousho.observe.errors import BadAgentOption
from lousho.observe.trigger.cycle import parse_agent
from lousho.observe.trigger.detector import judge

INTERVAL = "0.1"


@pytest.mark.parametrize(("outcomes", "before", "recent", "regressed"), [
    ([True] * 20 + [False] * 20, 20, 0, True),
    ([True] * 40, 20, 20, False),  # z undefined: no evidence
    ([False] * 40, 0, 0, False),
    ([True] * 20 + [True] * 16 + [False] * 4, 20, 16, True),  # z = 2.108
    ([True] * 20 + [True] * 17 + [False] * 3, 20, 17, False),  # z = 1.80
    ([True] * 20 + [True] * 19 + [False], 20, 19, False),  # drop 0.05 is not over 0.05
    ([False] * 20 + [True] * 20 + [True] * 20, 20, 20, False),  # only the newest 40 count
    ([True, False] * 20, 10, 10, False),
])
def test_judge_compares_the_newest_window_with_the_one_before(outcomes, before, recent, regressed):
    window = judge(outcomes)
    assert window is not None
    assert (window.before_passes, window.recent_passes, window.regressed) == (before, recent, regressed)


def test_judge_waits_for_two_full_windows_and_takes_its_parameters():
    assert judge([True] * 20 + [False] * 19) is None
    small = judge([True] * 5 + [False] * 5, window=5)
    assert small is not None and small.regressed and small.z == pytest.approx(3.1623, abs=1e-4)
    strict = judge([True] * 20 + [True] * 16 + [False] * 4, z_min=2.5)
    assert strict is not None and not strict.regressed
    lenient = judge([True] * 20 + [True] * 19 + [False], min_drop=0.0, z_min=1.0)
    assert lenient is not None and lenient.regressed


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "coder"
    directory.mkdir()
    (directory / "instructions.md").write_text("Answer tersely.\n")
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    return directory


def test_parse_agent_resolves_absolute_paths(agent_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(agent_dir.parent)
    spec = parse_agent("coder=coder:check.py")
    assert (spec.name, spec.directory, spec.check) == ("coder", agent_dir, agent_dir.parent / "check.py")


@pytest.mark.parametrize(("value", "message"), [
    ("coder", "no NAME= part"),
    ("=coder:check.py", "no NAME= part"),
    ("coder=coder", "no :CHECK_MODULE part"),
    ("coder=missing:check.py", "the agent directory missing does not exist"),
    ("coder=coder:missing.py", "the check module missing.py does not exist"),
])
def test_bad_agent_exits_2_before_the_daemon_starts(agent_dir, monkeypatch, capsys, value, message):
    monkeypatch.chdir(agent_dir.parent)
    db = agent_dir.parent / "o.duckdb"
    with pytest.raises(SystemExit) as exited:
        run(observe, ["--db", str(db), "--port", "0", "--grpc-port", "-1", "--agent", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"error {BadAgentOption.code}: --agent {value!r}: " in err
    assert message in err and "hint: write --agent NAME=DIR:CHECK_MODULE" in err
    assert not db.exists()  # serve() never ran: no store, no port


def test_an_agent_registered_twice_is_a_usage_error(agent_dir, monkeypatch, capsys):
    monkeypatch.chdir(agent_dir.parent)
    with pytest.raises(SystemExit) as exited:
        run(observe, ["--port", "0", "--agent", "coder=coder:check.py", "--agent", "coder=coder:check.py"])
    assert exited.value.code == 2
    assert "--agent coder is registered twice" in capsys.readouterr().err


@pytest.fixture
def watched(agent_dir: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """A daemon watching ``agent_dir`` as agent "coder" with the seeds' window rule, polling every 0.1 s."""
    started: list[DaemonProcess] = []

    def start(env: dict[str, str] | None = None) -> DaemonProcess:
        spec = f"coder={agent_dir}:{agent_dir.parent / 'check.py'}"
        daemon = start_daemon(agent_dir.parent / "o.duckdb", "--agent", spec, "--trigger", "seed",
                              "--trigger-interval", INTERVAL, env={"LOUSHO_IMPROVE": "on", **(env or {})})
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


class Emitter:
    """Runs of agent "coder" through the real OTel exporter, in start order."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.provider = instrument("coder", daemon.url)
        self.count = 0

    def runs(self, outcome: str, n: int, revision: str = "rev-1") -> None:
        for _ in range(n):
            self.count += 1
            emit_run(self.provider, f"run-{self.count}", revision=revision, outcome=outcome)
        self.settle()

    def probes(self, outcome: str, n: int) -> None:
        for _ in range(n):
            self.count += 1
            emit_run(self.provider, f"run-{self.count}", outcome=outcome, probe=True)
        self.settle()

    def settle(self) -> None:
        """Everything emitted is stored, and the trigger has finished a look it began after that: an
        assertion that nothing happened then means the trigger saw the runs, not that it was slow."""
        assert self.provider.force_flush()
        wait_for(lambda: sql(self.daemon.url, "SELECT count(*) AS n FROM runs")[0]["n"] == self.count)
        # The look in flight now may have read the store before the last runs were committed.
        seen = trigger_polls(self.daemon.url)
        wait_for(lambda: trigger_polls(self.daemon.url) >= seen + 2)


@pytest.fixture
def emitter() -> Iterator[Callable[[DaemonProcess], Emitter]]:
    made: list[Emitter] = []

    def make(daemon: DaemonProcess) -> Emitter:
        made.append(Emitter(daemon))
        return made[-1]

    yield make
    for e in made:
        e.provider.shutdown()


def trigger_polls(url: str) -> int:
    """The daemon's count of the trigger's completed looks (``/metrics``)."""
    reply = get(url, "/metrics")
    assert reply.status == 200
    [line] = [line for line in reply.body.decode().splitlines() if line.startswith("lousho_trigger_polls_total ")]
    return int(line.split()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def records(agent_dir: Path) -> list[dict]:
    path = agent_dir / ".lousho" / "trigger.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    assert all(line == json.dumps(json.loads(line), sort_keys=True) for line in lines)
    return [json.loads(line) for line in lines]


def started(agent_dir: Path) -> list[dict]:
    return [r for r in records(agent_dir) if r["action"] == "started"]


@pytest.mark.system
def test_a_regression_starts_exactly_one_cycle_per_live_revision(watched, emitter, agent_dir):
    daemon = watched()
    runs = emitter(daemon)
    runs.runs("pass", 20)
    runs.runs("fail", 20)
    wait_for(lambda: len(started(agent_dir)) == 1)
    [first] = started(agent_dir)
    assert first["agent"] == "coder" and first["revision"] == "rev-1"
    assert (first["window"], first["before_passes"], first["recent_passes"]) == (20, 20, 0)
    assert first["z"] == pytest.approx(6.3246, abs=1e-4)
    assert isinstance(first["pid"], int) and first["pid"] != daemon.pid
    assert Path(first["log"]).parent == agent_dir / ".lousho" / "cycles"
    assert any(f"started agent=coder revision=rev-1 pid={first['pid']}" in line for line in daemon.output)

    # More failures, then the same drop again on the same revision: no second cycle.
    runs.runs("fail", 5)
    runs.runs("pass", 20)
    runs.runs("fail", 20)
    assert started(agent_dir) == [first]

    # A new live revision (what an applied edit makes) may trigger again, once the first cycle is done.
    runs.runs("pass", 20, revision="rev-2")
    runs.runs("fail", 20, revision="rev-2")
    wait_for(lambda: len(started(agent_dir)) == 2, timeout=60)
    assert started(agent_dir)[1]["revision"] == "rev-2"

    assert daemon.stop() == 0
    # The daemon spawned and reaped real children with those pids (exited, or stopped with it).
    for record in started(agent_dir):
        assert any(f"(pid {record['pid']})" in line for line in daemon.output), daemon.output[-20:]


@pytest.mark.system
def test_a_healthy_agent_starts_no_cycle(watched, emitter, agent_dir):
    daemon = watched()
    runs = emitter(daemon)
    runs.runs("pass", 45)
    runs.runs("fail", 1)
    assert records(agent_dir) == []


@pytest.mark.system
def test_probe_runs_do_not_vote(watched, emitter, agent_dir):
    daemon = watched()
    runs = emitter(daemon)
    runs.runs("pass", 40)
    runs.probes("fail", 20)
    assert records(agent_dir) == []


@pytest.mark.system
@pytest.mark.parametrize("switch", ["file", "env"])
def test_the_kill_switch_skips_the_cycle_without_using_up_the_regression(watched, emitter, agent_dir, switch):
    stop_file = agent_dir / ".lousho" / "improve.stop"
    if switch == "file":
        stop_file.parent.mkdir()
        stop_file.touch()
    daemon = watched(env={"LOUSHO_IMPROVE": "off"} if switch == "env" else None)
    runs = emitter(daemon)
    runs.runs("pass", 20)
    runs.runs("fail", 20)
    runs.settle()  # more polls: the skip is recorded once, not on each
    [skip] = records(agent_dir)
    assert skip["action"] == "skipped" and skip["pid"] is None and skip["revision"] == "rev-1"
    assert skip["reason"].startswith("kill switch:")
    if switch == "file":
        stop_file.unlink()
        wait_for(lambda: len(started(agent_dir)) == 1)
