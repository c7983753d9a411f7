"""One agent run on a fresh copy of the project, and the meter that counts what an attempt spent.

Every model client the benchmark hands out (the probe's, the live traffic's, the editors') goes
through a :class:`Meter`, so requests and tokens are counted the same way for the scripted model and a
live endpoint; agent runs are counted by :func:`run_case`.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lousho.agent import directory as agent_directory
from lousho.agent.directory import AgentDir
from lousho.agent.loop import Agent, RunOptions, RunResult
from lousho.agent.verdict import Verdict
from lousho.bench.heal.project import Scorer, run_copy
from lousho.bench.heal.tasks import task_of
from lousho.models.errors import ProviderError
from lousho.models.protocol import Message, ModelClient, Tool
from lousho.models.result import ChatResult, Usage
from lousho.recover.store import RunStore


@dataclass
class Meter:
    """Requests, tokens and agent runs of one attempt (all threads)."""

    requests: int = 0
    tokens: int = 0
    agent_runs: int = 0
    # The split of ``tokens`` a run's record keeps, so the gate can price it (input includes cache reads).
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, requests: int = 0, tokens: int = 0, agent_runs: int = 0, usage: Usage | None = None) -> None:
        with self._lock:
            self.requests += requests
            self.tokens += tokens
            self.agent_runs += agent_runs
            if usage is not None:
                self.input_tokens += usage.input_tokens
                self.output_tokens += usage.output_tokens
                self.cache_read_tokens += usage.cache_read_tokens

    def to_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "tokens": self.tokens, "agent_runs": self.agent_runs}

    def usage(self) -> Usage:
        with self._lock:
            return Usage(self.input_tokens, self.output_tokens, self.cache_read_tokens)


@dataclass
class Metered:
    """A model client whose every call is counted on ``meters`` (the attempt's, and a run's own)."""

    inner: ModelClient
    meters: Sequence[Meter]
    before_call: Callable[[], None] | None = None  # the live guard, before each editor call
    # The text of every message sent, so a scenario can check what a model (live or scripted) really read.
    sent: list[str] = field(default_factory=list)

    def complete(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                 temperature: float | None = None, seed: int | None = None,
                 max_tokens: int | None = None) -> ChatResult:
        if self.before_call is not None:
            self.before_call()
        self.sent.extend(str(m.get("content") or "") for m in messages)
        result = self.inner.complete(messages, tools, temperature=temperature, seed=seed, max_tokens=max_tokens)
        for meter in self.meters:
            meter.add(requests=1, tokens=result.usage.total_tokens, usage=result.usage)
        return result


@dataclass(frozen=True)
class Outcome:
    """One scored run."""

    run_id: str
    result: RunResult | None
    verdict: Verdict
    requests: int
    tokens: int
    error: str | None = None
    usage: Usage = field(default_factory=Usage)  # the run's calls summed: its tokens split for its price


@dataclass
class Runner:
    """Runs bug reports with the reference agent on a model client, one fresh project copy per run.

    ``store`` keeps the runs' checkpoints (one SQLite file per attempt); ``tracer_provider`` exports the
    runs' spans to the observe daemon (live traffic) or is None (probe runs stay out of the store).
    """

    client: ModelClient
    model_name: str
    store: RunStore
    meter: Meter
    scorer: Scorer
    planted: dict[str, str] | None = None
    _dirs: dict[tuple[Path, str], AgentDir] = field(default_factory=dict, repr=False)

    def directory(self, path: Path) -> AgentDir:
        """The loaded agent directory, once per harness revision (loading executes tools.py)."""
        key = (Path(path).resolve(), agent_directory.harness_revision(Path(path)))
        if key not in self._dirs:
            self._dirs[key] = agent_directory.load(path)
        return self._dirs[key]

    def send(self, agent_dir: Path, text: str, run_id: str) -> RunResult:
        """A run on a copy some other run made (a sub-agent call of the product layout): not scored."""
        directory = self.directory(agent_dir)
        agent = Agent(directory, Metered(self.client, (self.meter,)), self.store, model_name=self.model_name,
                      hooks=directory.hooks)
        try:
            return agent.send(text, run_id=run_id)
        finally:
            self.meter.add(agent_runs=1)

    def run(self, agent_dir: Path, text: str, *, case_id: str | None = None, probe: bool = False,
            arm: str | None = None, run_id: str | None = None, tracer_provider: Any | None = None,
            record_verdict: bool = False) -> Outcome:
        directory = self.directory(agent_dir)
        task = task_of(text)
        run_id = run_id or f"hb-{uuid.uuid4().hex[:16]}"
        copy = run_copy(directory.path, run_id.split(".")[0], planted=self.planted)
        own = Meter()
        client = Metered(self.client, (self.meter, own))
        verdict: Verdict | None = None

        def check(_input: str, _output: str | None) -> Verdict:
            nonlocal verdict
            verdict = self.scorer.score(task, copy) if task else Verdict("cannot-score", explanation="no task")
            return verdict

        agent = Agent(directory, client, self.store, model_name=self.model_name, hooks=directory.hooks,
                      tracer_provider=tracer_provider, check=check if record_verdict else None)
        try:
            result = agent.send(text, run_id=run_id, options=RunOptions(case_id=case_id, probe=probe,
                                                                        traffic_arm=arm))
            if verdict is None:
                verdict = (check(text, result.output) if result.finish_reason in ("stop", "max-steps")
                           else Verdict("fail", explanation=f"the run ended {result.finish_reason}"))
        except ProviderError as e:
            return Outcome(run_id, None, Verdict("cannot-score", explanation=e.message), own.requests, own.tokens,
                           f"{e.code}: {e.message}", own.usage())
        finally:
            self.meter.add(agent_runs=1)
            shutil.rmtree(copy, ignore_errors=True)
        return Outcome(run_id, result, verdict, own.requests, own.tokens, usage=own.usage())
