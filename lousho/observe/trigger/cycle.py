"""The regression trigger: the daemon watches registered agents and starts an improvement cycle when
one's live pass rate drops (seed: "A score regression seen by the observe daemon can also start one").

An agent is registered with ``--agent NAME=DIR:CHECK_MODULE``. Every ``interval_s`` the trigger reads
the agent's non-probe runs through the SQL API's read path (a cursor of the daemon's database and
``sql.run_query``; the writer thread stays the only writer) and takes the *live revision* (the newest
``harness_revision`` those runs used, derived or tagged; NULL when none has one: one unversioned revision).
The default detector (``cusum``) is fed every run of that revision that ended since its last look, in order,
and keeps its statistic between looks: a drop is seen even when it lies wholly between two looks. A run
counts once it ended ``settle_s`` ago (its verdict had time to arrive); a run without a pass then (failed,
unscored, crashed) is a failure. Its reading is written to ``DIR/.lousho/trigger-state.json`` (for the
agent's page) and given to ``on_reading`` (``/metrics``). A new revision's CUSUM starts from its first run
against the reference of the revision before it (``Detector.carried_to``): a changed prompt that hurts is
caught as a drop from the old pass rate; a daemon restarted since then rebuilds the new revision's own.
``--trigger seed`` judges the newest scored runs with the seeds' monitor rule instead (``detector.judge``),
with the runs just before a new revision while it has too few of its own (``live_window``).

On a regression it runs ``python -m lousho improve DIR --check CHECK_MODULE --apply --json`` as a child
process, with the models the daemon was given (``--model-url`` ... ``--editor-model``): once per (agent,
live revision) — the ``started`` lines of ``DIR/.lousho/trigger.jsonl`` are that memory, so a restarted
daemon does not start a second cycle for the same regression — and never while the agent's previous
cycle still runs. The cycle enforces the budgets and the kill switch itself; the trigger also skips on
``DIR/.lousho/improve.stop`` or ``LOUSHO_IMPROVE=off``, so a stopped loop does not even spawn.

When a cycle ends, the trigger reads its outcome (the last JSON line of its log) and writes one
``finished`` line and one log line: applied, queued, kept-base, ... or failed with the error's code, and
the cycle log's path. A cycle that failed before its step could judge anything (the cycle says
``retry``: a bad directory, a model that is down; or it could not start at all, exit 2) does not use up
the regression: the same revision gets another cycle after a backoff that doubles from
``retry_base_s`` up to 15 minutes, until one gets past that point.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from lousho.observe import memory_cap
from lousho.observe.errors import BadAgentOption
from lousho.observe.sql import query as sql_api
from lousho.observe.trigger.detector import (
    MIN_DROP,
    WINDOW,
    Z_MIN,
    CusumConfig,
    Detector,
    Reading,
    Run,
    Window,
    judge,
)
from lousho.observe.trigger.live_runs import BATCH, LIVE_REVISION, LIVE_RUNS, NEW_RUNS, live_window

logger = logging.getLogger(__name__)

# A cycle still running when the daemon stops gets this long to exit after SIGTERM before SIGKILL.
_CYCLE_STOP_S = 10.0
# Retries of a cycle that failed before its step: the wait doubles up to this (the recover loop's cap).
_RETRY_CAP_S = 15 * 60.0
# A cycle that cannot start (a usage error: bad flags, a directory gone) exits 2, as every lousho CLI does.
_USAGE_EXIT = 2

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
    """``NAME=DIR:CHECK_MODULE`` -> an AgentSpec; the directory and the check file must exist.

    Only the syntax and the paths: what they hold is checked by the improve part, through the hook the
    entry point gives the daemon command (``lousho.observe.entry.check_agent``)."""
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
    # The detector: "cusum" (the default) or "seed" (the seeds' window rule, with the three numbers below).
    rule: str = "cusum"
    cusum: CusumConfig = field(default_factory=CusumConfig)
    # A run counts once it ended this long ago: its verdict (a score span) had time to arrive.
    settle_s: float = 30.0
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
    # The daemon's own TLS certificate, which its cycles trust when it is served over https.
    observe_ca_cert: Path | None = None
    # The cycle's models (the agent's, for probes without probe(), and the editors'); None: the cycle's
    # own defaults (its environment's LOUSHO_MODEL_URL, ...).
    models: CycleModels = field(default_factory=lambda: CycleModels())
    # The first wait before a cycle that failed before its step is tried again; it doubles each time.
    retry_base_s: float = 30.0


@dataclass(frozen=True)
class CycleModels:
    """The ``--model-url``/``--model``/``--editor-model-url``/``--editor-model`` a cycle is started with."""

    model_url: str | None = None
    model: str | None = None
    editor_model_url: str | None = None
    editor_model: str | None = None

    def flags(self) -> list[str]:
        pairs = (("--model-url", self.model_url), ("--model", self.model),
                 ("--editor-model-url", self.editor_model_url), ("--editor-model", self.editor_model))
        return [part for flag, value in pairs if value for part in (flag, value)]

    def urls(self) -> list[str]:
        """The model URLs given, each checked at start by the models part (a malformed one fails every cycle)."""
        return [url for url in (self.model_url, self.editor_model_url) if url]


def cycle_command(agent: AgentSpec, observe_url: str | None = None, models: CycleModels | None = None) -> list[str]:
    # Models not given to the daemon come from the environment the child inherits (LOUSHO_MODEL_URL, ...).
    command = [sys.executable, "-P", "-m", "lousho", "improve", str(agent.directory), "--check", str(agent.check),
               "--apply", "--json", "--agent-name", agent.name, *(models or CycleModels()).flags()]
    return command + (["--observe", observe_url] if observe_url else [])


@dataclass(frozen=True)
class CycleOutcome:
    """How a cycle ended, from its exit code and the last JSON line of its log."""

    outcome: str  # the cycle's (applied, queued, kept-base, refused, ...), or "failed"
    reason: str
    code: str | None = None
    proposal: str | None = None
    retry: bool = False

    def describe(self) -> str:
        if self.outcome in ("failed", "error"):
            return f"failed {self.code or '(no code)'}: {self.reason}"
        proposal = f" {self.proposal}" if self.proposal else ""
        label = {"applied": "proposal applied", "queued": "proposal queued", "kept-base": "kept base"}
        return f"{label.get(self.outcome, self.outcome)}{proposal}: {self.reason}"


def cycle_outcome(returncode: int, log_text: str) -> CycleOutcome:
    """Read a finished cycle's outcome. ``--json`` makes the cycle's result its last stdout line; a cycle
    that could not start printed ``error CODE: message`` instead (exit 2: retried, like a bad directory)."""
    for line in reversed(log_text.splitlines()):
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "outcome" in data:
            return CycleOutcome(str(data["outcome"]), str(data.get("reason", ""))[:500], data.get("code"),
                                data.get("proposal_id"), bool(data.get("retry")))
    code = next((m.group(1) for m in _ERROR_LINE.finditer(log_text)), None)
    message = next((m.group(2) for m in _ERROR_LINE.finditer(log_text)), f"exited with code {returncode}")
    return CycleOutcome("failed", message[:500], code, retry=returncode == _USAGE_EXIT)


_ERROR_LINE = re.compile(r"^error (LOUSHO_[A-Z0-9_]+): (.*)$", re.M)


def cycle_environment(base: dict[str, str], token: str | None, ca_cert: Path | None = None) -> dict[str, str]:
    """The cycle's environment: the daemon's own, with ``LOUSHO_TOKEN`` set to the daemon's token and, for a
    daemon on TLS, ``LOUSHO_CA_CERT`` to its certificate.

    A daemon given ``--token`` has no LOUSHO_TOKEN of its own to pass on, and a daemon without a token
    must not hand its cycle a stale one from its environment for a different daemon (nor a stale CA)."""
    env = {k: v for k, v in base.items() if k not in ("LOUSHO_TOKEN", "LOUSHO_CA_CERT")}
    if token:
        env["LOUSHO_TOKEN"] = token
    if ca_cert is not None:
        env["LOUSHO_CA_CERT"] = str(ca_cert.resolve())
    return env


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# The trigger's looks take at most one part in this many of its thread's time.
LOOK_SHARE = 6


class Trigger:
    """Polls on a thread of its own; ``start`` and ``stop`` are called from the daemon's main thread.

    ``reader_factory`` returns a fresh read cursor (``SpanStore.reader``); the trigger never writes
    the store. ``stop`` interrupts a query in flight, joins the thread, then stops cycles still
    running (SIGTERM, then SIGKILL): a cycle is the daemon's child and must not outlive it unsupervised.
    ``on_poll`` is called on the trigger's thread after each completed look at an agent (the daemon
    counts them in ``/metrics``); it must not block.
    """

    def __init__(self, config: TriggerConfig, reader_factory: Callable[[], duckdb.DuckDBPyConnection], *,
                 sql_timeout_s: float = 30.0, log: Callable[[str], None] = _stderr,
                 on_poll: Callable[[], None] = lambda: None,
                 on_reading: Callable[[str, Reading], None] = lambda name, reading: None,
                 query: Callable[[str, list[Any], float], sql_api.QueryResult] | None = None,
                 lease: Callable[[str], bool] | None = None) -> None:
        self.config = config
        # In a fleet (observe/lake/): the runs are read from the lake, every daemon's, by ``query``, and an agent is
        # watched only while ``lease(name)`` says this daemon holds its trigger (one daemon at a time).
        self._query = query
        self._lease = lease
        self._holding: dict[str, bool] = {}
        self._on_poll = on_poll
        self._on_reading = on_reading
        self._detectors: dict[str, Detector] = {}  # agent -> its live revision's CUSUM
        self._shown: dict[str, dict[str, Any]] = {}  # agent -> the state last written for its page
        self._reader_factory = reader_factory
        self._sql_timeout_s = sql_timeout_s
        self._log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._cycles: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}  # name -> process, revision, log
        self._started = {(a.name, rev) for a in config.agents for rev in _started_revisions(a)}
        self._skipped: set[tuple[str, str, str]] = set()
        # name -> (revision, failed attempts, monotonic time before which it is not retried)
        self._retry: dict[str, tuple[str, int, float]] = {}

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
        for name, (process, _, _) in list(self._cycles.items()):
            self._stop_cycle(name, process)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for agent in self.config.agents:
                if self._stop.is_set():
                    break
                try:
                    if not self._holds(agent):
                        continue
                    self.poll(agent)
                    self._on_poll()
                except Exception:
                    # Deliberately broad: one bad poll (a query timeout, a full disk) must not end the
                    # watch; the traceback goes to the daemon's log and the next poll tries again.
                    logger.exception("lousho trigger: poll of agent %s failed", agent.name)
            # Looks take at most 1/LOOK_SHARE of the time: a look at the lake computes the runs from every span
            # (about 10 s at 10M spans), where the local store's takes milliseconds and the interval decides.
            self._stop.wait(max(self.config.interval_s, (LOOK_SHARE - 1) * (time.monotonic() - started)))

    def _holds(self, agent: AgentSpec) -> bool:
        """Whether this daemon watches ``agent`` now: always alone, in a fleet while it holds the agent's lease."""
        if self._lease is None:
            return True
        holds = self._lease(f"trigger:{agent.name}")
        if self._holding.get(agent.name) != holds:
            self._holding[agent.name] = holds
            self._log(f"lousho trigger: agent {agent.name} is watched "
                      f"{'here (this daemon holds its lease)' if holds else 'by another daemon of the fleet'}")
        return holds

    def _run_query(self, con: duckdb.DuckDBPyConnection | None, query: str, params: list[Any]) -> sql_api.QueryResult:
        if self._query is not None:
            return self._query(query, params, self._sql_timeout_s)
        assert con is not None
        return sql_api.run_query(con, query, params, timeout=self._sql_timeout_s)

    def _open(self) -> duckdb.DuckDBPyConnection | None:
        if self._query is not None:
            return None
        con = self._reader_factory()
        self._cursor = con
        return con

    def _close(self, con: duckdb.DuckDBPyConnection | None) -> None:
        self._cursor = None
        if con is not None:
            con.close()

    def poll(self, agent: AgentSpec) -> None:
        """One look at ``agent``: reap its finished cycle, judge its live revision, act on a regression."""
        self._reap(agent)
        if self.config.rule == "seed":
            found, revision, outcomes = self._live_outcomes(agent)
            window: Window | Reading | None = None
            if found and outcomes:
                window = judge(outcomes, window=self.config.window, min_drop=self.config.min_drop,
                               z_min=self.config.z_min)
        else:
            found, revision, window = self._watch(agent)
        if found:
            # Once another revision is live, an older one's regression is over: if a rollback brings it
            # back, a new regression on it may start a cycle again (the loop's cooldown still applies).
            self._started = {(a, r) for a, r in self._started if a != agent.name or r == revision}
        if not found or (agent.name, revision) in self._started:
            return
        if window is None or not window.regressed:
            return
        retry = self._retry.get(agent.name)
        if retry is not None and retry[0] == revision and time.monotonic() < retry[2]:
            return  # a failed cycle's backoff: logged when it was scheduled
        reason = self._skip_reason(agent)
        if reason is not None:
            self._skip(agent, revision, window, reason)
            return
        self._start_cycle(agent, revision, window)

    def _live_outcomes(self, agent: AgentSpec) -> tuple[bool, str | None, list[bool]]:
        """Whether the agent has scored runs, its live revision (None: unversioned) and the outcomes to
        judge, oldest first (``live_window``)."""
        con = self._open()
        try:
            result = self._run_query(con, LIVE_RUNS, [agent.name, 2 * self.config.window])
        finally:
            self._close(con)
        rows = result.table.to_pylist()
        if not rows:
            return False, None, []
        return True, rows[0]["revision"], live_window(rows, self.config.window)

    def _watch(self, agent: AgentSpec) -> tuple[bool, str | None, Reading | None]:
        """Feed the live revision's CUSUM every run that ended since its last look: whether the agent has
        runs, the live revision (None: unversioned) and the detector's reading."""
        con = self._open()
        try:
            rows = self._run_query(con, LIVE_REVISION, [agent.name]).table.to_pylist()
            if not rows or not rows[0]["runs"]:
                return False, None, None
            revision = rows[0]["revision"]
            detector = self._detectors.get(agent.name)
            if detector is None:
                detector = self._detectors[agent.name] = Detector(revision, self.config.cusum)
            elif detector.revision != revision:
                # A new live revision (or an old one back): a CUSUM from its first run, against the reference of
                # the revision before it (its own once that one had none complete).
                detector = self._detectors[agent.name] = detector.carried_to(revision)
            cutoff = int((time.time() - self.config.settle_s) * 1e6)
            while not self._stop.is_set():
                ended, run_id = detector.position or (-(2 ** 62), "")
                batch = self._run_query(con, NEW_RUNS, [agent.name, revision, cutoff, ended, ended, run_id,
                                                         BATCH]).table.to_pylist()
                detector.feed([Run(r["run_id"], r["ended_us"], r["passed"], r["session"]) for r in batch])
                if len(batch) < BATCH:
                    break
        finally:
            self._close(con)
        reading = detector.reading()
        self._on_reading(agent.name, reading)
        self._show(agent, reading)
        return True, revision, reading

    def _show(self, agent: AgentSpec, reading: Reading) -> None:
        """The reading for the agent's page: ``trigger-state.json``, replaced whole when it changed."""
        state = {"agent": agent.name, "revision": reading.revision, "describe": reading.describe(),
                 "reference_needed": reading.reference_needed, **reading.evidence()}
        if self._shown.get(agent.name) == state:
            return
        agent.state_dir.mkdir(parents=True, exist_ok=True)
        path = agent.state_dir / "trigger-state.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
        self._shown[agent.name] = state

    def _skip_reason(self, agent: AgentSpec) -> str | None:
        if self.config.improve_off:
            return "kill switch: LOUSHO_IMPROVE=off"
        if (agent.state_dir / "improve.stop").exists():
            return f"kill switch: {agent.state_dir / 'improve.stop'} exists"
        running = self._cycles.get(agent.name)
        if running is not None:
            return f"previous cycle still running (pid {running[0].pid})"
        return None

    def _skip(self, agent: AgentSpec, revision: str, window: Window | Reading, reason: str) -> None:
        # A skip is not a start: the regression may still start a cycle once the cause clears. Each
        # (revision, reason) is recorded once, not on every poll.
        key = (agent.name, revision, reason)
        if key in self._skipped:
            return
        self._skipped.add(key)
        self._record(agent, revision, window, "skipped", reason, pid=None)

    def _start_cycle(self, agent: AgentSpec, revision: str, window: Window | Reading) -> None:
        at = datetime.now(UTC)
        cycle_log = agent.state_dir / "cycles" / f"{at.strftime('%Y%m%dT%H%M%S.%fZ')}.log"
        cycle_log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with cycle_log.open("ab") as out:
                # close_fds (the default) keeps the daemon's listening sockets out of the child.
                command = cycle_command(agent, self.config.observe_url, self.config.models)
                # The daemon's environment is passed through, not read as configuration: the cycle's
                # CLI resolves its own flags from it (LOUSHO_MODEL_URL, the model's key, ...).
                env = cycle_environment(dict(os.environ), self.config.observe_token, self.config.observe_ca_cert)
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, env=env)
                # The daemon's memory cap is sized for the daemon, not for the agent's cycle.
                memory_cap.release(process.pid)
        except OSError as e:
            self._skip(agent, revision, window, f"could not start the cycle: {e}")
            return
        self._cycles[agent.name] = (process, revision, cycle_log)
        self._started.add((agent.name, revision))
        retry = self._retry.get(agent.name)
        attempt = retry[1] + 1 if retry is not None and retry[0] == revision else 1
        self._record(agent, revision, window, "started", f"regression: {window.describe()}",
                     pid=process.pid, log=str(cycle_log), attempt=attempt)

    def _reap(self, agent: AgentSpec) -> None:
        running = self._cycles.get(agent.name)
        if running is None or running[0].poll() is None:
            return
        process, revision, cycle_log = running
        del self._cycles[agent.name]
        try:
            text = cycle_log.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            text = f"error LOUSHO_OBSERVE_CYCLE_LOG: cannot read {cycle_log}: {e}"
        outcome = cycle_outcome(process.returncode, text)
        extra: dict[str, Any] = {"outcome": outcome.outcome, "code": outcome.code, "proposal": outcome.proposal,
                                 "exit_code": process.returncode, "log": str(cycle_log), "retry": outcome.retry}
        if outcome.retry:
            previous = self._retry.get(agent.name)
            failures = previous[1] + 1 if previous is not None and previous[0] == revision else 1
            wait = min(self.config.retry_base_s * 2.0 ** (failures - 1), _RETRY_CAP_S)
            self._retry[agent.name] = (revision, failures, time.monotonic() + wait)
            # The regression is not used up: the same revision may start a cycle once the wait is over.
            self._started.discard((agent.name, revision))
            extra["retry_in_s"] = round(wait, 3)
        elif self._retry.get(agent.name, ("",))[0] == revision:
            del self._retry[agent.name]
        then = f"; retry in {extra['retry_in_s']:g} s" if outcome.retry else ""
        self._finished(agent, revision, process, f"{outcome.describe()}{then}; log {cycle_log}", **extra)

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

    def _record(self, agent: AgentSpec, revision: str, window: Window | Reading, action: str, reason: str,
                **extra: Any) -> None:
        self._append(agent, {
            "at": datetime.now(UTC).isoformat(), "agent": agent.name, "revision": revision,
            "action": action, "reason": reason, **window.evidence(), **extra,
        })
        pid = f" pid={extra['pid']}" if extra.get("pid") is not None else ""
        self._log(f"lousho trigger: {action} agent={agent.name} revision={revision}{pid}: {reason}")

    def _finished(self, agent: AgentSpec, revision: str, process: subprocess.Popen[bytes], reason: str,
                  **extra: Any) -> None:
        """The one line per cycle: its outcome (or failure and code) and where its log is."""
        self._append(agent, {"at": datetime.now(UTC).isoformat(), "agent": agent.name, "revision": revision,
                             "action": "finished", "reason": reason, "pid": process.pid, **extra})
        self._log(f"lousho trigger: cycle of agent {agent.name} (pid {process.pid}) exited with code "
                  f"{process.returncode}: {reason}")

    @staticmethod
    def _append(agent: AgentSpec, entry: dict[str, Any]) -> None:
        agent.state_dir.mkdir(parents=True, exist_ok=True)
        with (agent.state_dir / "trigger.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


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
        if not isinstance(entry, dict) or entry.get("agent") != agent.name:
            continue
        if entry.get("action") == "started":
            revisions.add(str(entry.get("revision")))
        elif entry.get("action") == "finished" and entry.get("retry"):
            revisions.discard(str(entry.get("revision")))  # failed before its step: not used up
    return revisions


def read_state(agent: AgentSpec) -> dict[str, Any] | None:
    """The detector's last reading the daemon wrote for ``agent`` (``trigger-state.json``), or None."""
    try:
        state = json.loads((agent.state_dir / "trigger-state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return state if isinstance(state, dict) else None


def read_records(agent: AgentSpec, limit: int = 20) -> list[dict[str, Any]]:
    """The newest ``limit`` lines of the agent's trigger log, newest first (for the agent's page)."""
    path = agent.state_dir / "trigger.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
        if len(out) >= limit:
            break
    return out
