"""The regression trigger: the daemon watches registered agents and starts an improvement cycle when
one's live pass rate drops (seed: "A score regression seen by the observe daemon can also start one").

An agent is registered with ``--agent NAME=DIR:CHECK_MODULE``. Every ``interval_s`` the trigger reads
the agent's non-probe runs through the SQL API's read path (a cursor of the daemon's database and
``sql.run_query``; the writer thread stays the only writer), takes the *live revision* (the newest
``harness_revision`` those runs used) and judges its scored runs with the seeds' monitor rule,
computed here because observe imports nothing of ours but ``lousho.errors``.

On a regression it runs ``python -m lousho improve DIR --check CHECK_MODULE --apply`` as a child
process: exactly once per (agent, live revision) — the ``started`` lines of ``DIR/.lousho/trigger.jsonl``
are that memory, so a restarted daemon does not start a second cycle for the same regression — and
never while the agent's previous cycle still runs. The cycle enforces the budgets and the kill switch
itself; the trigger also skips on ``DIR/.lousho/improve.stop`` or ``LOUSHO_IMPROVE=off``, so a
stopped loop does not even spawn.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from lousho.errors import UsageError
from lousho.observe import sql as sql_api
from lousho.observe.runs_view import runs_select

logger = logging.getLogger(__name__)

# The seeds' monitor numbers (seed §4.3): 20 runs per side, a drop over 0.05 at z >= 2.1.
WINDOW = 20
MIN_DROP = 0.05
Z_MIN = 2.1
# Counts sit on a lattice: absorb float noise so "drop > 0.05" and "z >= 2.1" mean exactly that at
# the boundary (1.00 - 0.95 is 0.0500000000000000444 in floats), as analysis' boundaries do.
_EPS = 1e-9
# A cycle still running when the daemon stops gets this long to exit after SIGTERM before SIGKILL.
_CYCLE_STOP_S = 10.0

# One aggregation over the agent's runs per poll: the live revision, then its newest scored runs.
_LIVE_RUNS = f"""
WITH r AS (
    SELECT run_id, harness_revision, passed, started_ns
    FROM ({runs_select("agent_name = ?")})
    WHERE NOT probe AND harness_revision IS NOT NULL
), live AS (
    SELECT harness_revision FROM r ORDER BY started_ns DESC, run_id DESC LIMIT 1
)
SELECT r.harness_revision AS revision, r.passed
FROM r JOIN live USING (harness_revision)
WHERE r.passed IS NOT NULL
ORDER BY r.started_ns DESC, r.run_id DESC
LIMIT ?
"""


class BadAgentOption(UsageError):
    code = "LOUSHO_OBSERVE_BAD_AGENT"
    hint = "write --agent NAME=DIR:CHECK_MODULE, e.g. --agent coder=agents/coder:agents/coder/check.py"


@dataclass(frozen=True)
class AgentSpec:
    """A registered agent: its ``gen_ai.agent.name``, directory and check module (absolute paths)."""

    name: str
    directory: Path
    check: Path

    @property
    def state_dir(self) -> Path:
        return self.directory / ".lousho"


def parse_agent(value: str) -> AgentSpec:
    """``NAME=DIR:CHECK_MODULE`` -> an AgentSpec; the directory and the check file must exist."""
    name, eq, rest = value.partition("=")
    if not eq or not name.strip():
        raise BadAgentOption(f"--agent {value!r}: expected NAME=DIR:CHECK_MODULE (no NAME= part)")
    # The check path is the part after the last colon: a directory may hold one, a module file rarely.
    directory, colon, check = rest.rpartition(":")
    if not colon or not directory or not check:
        raise BadAgentOption(f"--agent {value!r}: expected NAME=DIR:CHECK_MODULE (no :CHECK_MODULE part)")
    dir_path, check_path = Path(directory).expanduser(), Path(check).expanduser()
    if not dir_path.is_dir():
        raise BadAgentOption(f"--agent {value!r}: the agent directory {directory} does not exist")
    if not check_path.is_file():
        raise BadAgentOption(f"--agent {value!r}: the check module {check} does not exist")
    # Absolute: the cycle runs in the daemon's working directory, whatever it becomes.
    return AgentSpec(name.strip(), dir_path.resolve(), check_path.resolve())


def parse_agents(values: Sequence[str]) -> tuple[AgentSpec, ...]:
    specs = tuple(parse_agent(v) for v in values)
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise BadAgentOption(f"--agent {name} is registered twice")
    return specs


@dataclass(frozen=True)
class TriggerConfig:
    agents: tuple[AgentSpec, ...] = ()
    interval_s: float = 5.0
    window: int = WINDOW
    min_drop: float = MIN_DROP
    z_min: float = Z_MIN
    # LOUSHO_IMPROVE=off (read by the CLI): the kill switch for every agent of this daemon.
    improve_off: bool = False
    # This daemon's address, passed to the cycle as --observe.
    observe_url: str | None = None
    # This daemon's token: the cycle gets it as LOUSHO_TOKEN in its environment, never on its command
    # line (which any local user can read in the process list), and never in a log or repr.
    observe_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Window:
    """The rule's view of the last ``2 * size`` scored runs: passes before and in the recent window."""

    size: int
    before_passes: int
    recent_passes: int
    z: float | None
    regressed: bool

    def describe(self) -> str:
        z = "undefined" if self.z is None else f"{self.z:.2f}"
        return (f"pass rate {self.before_passes}/{self.size} -> {self.recent_passes}/{self.size} "
                f"over the last {2 * self.size} scored runs (z={z})")


def judge(outcomes: Sequence[bool], *, window: int = WINDOW, min_drop: float = MIN_DROP,
          z_min: float = Z_MIN) -> Window | None:
    """The seeds' monitor rule on outcomes oldest first: the newest ``window`` against the ``window``
    before them. None below ``2 * window`` outcomes. A regression is a pass-rate drop over
    ``min_drop`` with the pooled two-proportion z at least ``z_min``; an undefined z (both windows
    all pass or all fail) is no evidence of a drop."""
    if len(outcomes) < 2 * window:
        return None
    before = sum(bool(o) for o in outcomes[-2 * window:-window])
    recent = sum(bool(o) for o in outcomes[-window:])
    pooled = (before + recent) / (2 * window)
    se = math.sqrt(pooled * (1 - pooled) * (2 / window))
    z = (before - recent) / window / se if se > 0 else None
    drop = (before - recent) / window
    regressed = z is not None and drop > min_drop + _EPS and z >= z_min - _EPS
    return Window(window, before, recent, z, regressed)


def cycle_command(agent: AgentSpec, observe_url: str | None = None) -> list[str]:
    # The child inherits the daemon's environment: LOUSHO_MODEL_URL / LOUSHO_MODEL configure it.
    command = [sys.executable, "-m", "lousho", "improve", str(agent.directory), "--check", str(agent.check),
               "--apply"]
    return command + (["--observe", observe_url] if observe_url else [])


def cycle_environment(base: dict[str, str], token: str | None) -> dict[str, str]:
    """The cycle's environment: the daemon's own, with ``LOUSHO_TOKEN`` set to the daemon's token.

    A daemon given ``--token`` has no LOUSHO_TOKEN of its own to pass on, and a daemon without a token
    must not hand its cycle a stale one from its environment for a different daemon."""
    env = {k: v for k, v in base.items() if k != "LOUSHO_TOKEN"}
    if token:
        env["LOUSHO_TOKEN"] = token
    return env


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Trigger:
    """Polls on a thread of its own; ``start`` and ``stop`` are called from the daemon's main thread.

    ``reader_factory`` returns a fresh read cursor (``SpanStore.reader``); the trigger never writes
    the store. ``stop`` interrupts a query in flight, joins the thread, then stops cycles still
    running (SIGTERM, then SIGKILL): a cycle is the daemon's child and must not outlive it unsupervised.
    """

    def __init__(self, config: TriggerConfig, reader_factory: Callable[[], duckdb.DuckDBPyConnection], *,
                 sql_timeout_s: float = 30.0, log: Callable[[str], None] = _stderr) -> None:
        self.config = config
        self._reader_factory = reader_factory
        self._sql_timeout_s = sql_timeout_s
        self._log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._cycles: dict[str, subprocess.Popen[bytes]] = {}
        self._started = {(a.name, rev) for a in config.agents for rev in _started_revisions(a)}
        self._skipped: set[tuple[str, str, str]] = set()

    def start(self) -> None:
        for agent in self.config.agents:
            self._log(f"lousho trigger: watching agent {agent.name} ({agent.directory}) "
                      f"every {self.config.interval_s:g} s")
        self._thread = threading.Thread(target=self._run, name="lousho-trigger", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        cursor = self._cursor
        if cursor is not None:
            # The poll may have closed it in between: then there is nothing to interrupt.
            with contextlib.suppress(duckdb.Error):
                cursor.interrupt()
        if self._thread is not None:
            self._thread.join(self._sql_timeout_s + 5)
        for name, process in list(self._cycles.items()):
            self._stop_cycle(name, process)

    def _run(self) -> None:
        while not self._stop.is_set():
            for agent in self.config.agents:
                if self._stop.is_set():
                    break
                try:
                    self.poll(agent)
                except Exception:
                    # Deliberately broad: one bad poll (a query timeout, a full disk) must not end the
                    # watch; the traceback goes to the daemon's log and the next poll tries again.
                    logger.exception("lousho trigger: poll of agent %s failed", agent.name)
            self._stop.wait(self.config.interval_s)

    def poll(self, agent: AgentSpec) -> None:
        """One look at ``agent``: reap its finished cycle, judge its live revision, act on a regression."""
        self._reap(agent)
        revision, outcomes = self._live_outcomes(agent)
        if revision is not None:
            # Once another revision is live, an older one's regression is over: if a rollback brings it
            # back, a new regression on it may start a cycle again (the loop's cooldown still applies).
            self._started = {(a, r) for a, r in self._started if a != agent.name or r == revision}
        if revision is None or (agent.name, revision) in self._started:
            return
        window = judge(outcomes, window=self.config.window, min_drop=self.config.min_drop,
                       z_min=self.config.z_min)
        if window is None or not window.regressed:
            return
        reason = self._skip_reason(agent)
        if reason is not None:
            self._skip(agent, revision, window, reason)
            return
        self._start_cycle(agent, revision, window)

    def _live_outcomes(self, agent: AgentSpec) -> tuple[str | None, list[bool]]:
        """The live revision and its newest ``2 * window`` scored outcomes, oldest first."""
        con = self._reader_factory()
        self._cursor = con
        try:
            result = sql_api.run_query(con, _LIVE_RUNS, [agent.name, 2 * self.config.window],
                                       timeout=self._sql_timeout_s)
        finally:
            self._cursor = None
            con.close()
        rows = result.table.to_pylist()
        revision = rows[0]["revision"] if rows else None
        outcomes = [bool(r["passed"]) for r in reversed(rows) if r["passed"] is not None]
        return revision, outcomes

    def _skip_reason(self, agent: AgentSpec) -> str | None:
        if self.config.improve_off:
            return "kill switch: LOUSHO_IMPROVE=off"
        if (agent.state_dir / "improve.stop").exists():
            return f"kill switch: {agent.state_dir / 'improve.stop'} exists"
        running = self._cycles.get(agent.name)
        if running is not None:
            return f"previous cycle still running (pid {running.pid})"
        return None

    def _skip(self, agent: AgentSpec, revision: str, window: Window, reason: str) -> None:
        # A skip is not a start: the regression may still start a cycle once the cause clears. Each
        # (revision, reason) is recorded once, not on every poll.
        key = (agent.name, revision, reason)
        if key in self._skipped:
            return
        self._skipped.add(key)
        self._record(agent, revision, window, "skipped", reason, pid=None)

    def _start_cycle(self, agent: AgentSpec, revision: str, window: Window) -> None:
        at = datetime.now(UTC)
        cycle_log = agent.state_dir / "cycles" / f"{at.strftime('%Y%m%dT%H%M%S.%fZ')}.log"
        cycle_log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with cycle_log.open("ab") as out:
                # close_fds (the default) keeps the daemon's listening sockets out of the child.
                command = cycle_command(agent, self.config.observe_url)
                # The daemon's environment is passed through, not read as configuration: the cycle's
                # CLI resolves its own flags from it (LOUSHO_MODEL_URL, the model's key, ...).
                env = cycle_environment(dict(os.environ), self.config.observe_token)
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, env=env)
        except OSError as e:
            self._skip(agent, revision, window, f"could not start the cycle: {e}")
            return
        self._cycles[agent.name] = process
        self._started.add((agent.name, revision))
        self._record(agent, revision, window, "started", f"regression: {window.describe()}",
                     pid=process.pid, log=str(cycle_log))

    def _reap(self, agent: AgentSpec) -> None:
        process = self._cycles.get(agent.name)
        if process is not None and process.poll() is not None:
            del self._cycles[agent.name]
            self._log(f"lousho trigger: cycle of agent {agent.name} (pid {process.pid}) exited "
                      f"with code {process.returncode}")

    def _stop_cycle(self, name: str, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(_CYCLE_STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            self._log(f"lousho trigger: stopped the cycle of agent {name} (pid {process.pid}) "
                      f"with the daemon, code {process.returncode}")
        else:
            self._log(f"lousho trigger: cycle of agent {name} (pid {process.pid}) exited "
                      f"with code {process.returncode}")
        del self._cycles[name]

    def _record(self, agent: AgentSpec, revision: str, window: Window, action: str, reason: str,
                **extra: Any) -> None:
        entry = {
            "at": datetime.now(UTC).isoformat(), "agent": agent.name, "revision": revision,
            "action": action, "reason": reason, "window": window.size,
            "before_passes": window.before_passes, "recent_passes": window.recent_passes,
            "z": None if window.z is None else round(window.z, 4), **extra,
        }
        agent.state_dir.mkdir(parents=True, exist_ok=True)
        with (agent.state_dir / "trigger.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
        pid = f" pid={extra['pid']}" if extra.get("pid") is not None else ""
        self._log(f"lousho trigger: {action} agent={agent.name} revision={revision}{pid}: {reason}")


def _started_revisions(agent: AgentSpec) -> set[str]:
    """Revisions a cycle was already started for, from the trigger's own log (the once-memory)."""
    path = agent.state_dir / "trigger.jsonl"
    if not path.exists():
        return set()
    revisions = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a crash; the lines before it still count
        if isinstance(entry, dict) and entry.get("action") == "started" and entry.get("agent") == agent.name:
            revisions.add(str(entry.get("revision")))
    return revisions
