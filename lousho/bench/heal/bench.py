"""A benchmark run's shared parts and each attempt's own: daemon, models, directories, meters.

One observe daemon (its database in the work directory) serves every attempt; the scripted agent and
editor models are one server each whose policy is swapped, and whose counts are reset, per attempt, so
each attempt is reproducible on its own from its seed. Each attempt gets a directory with a fresh copy
of the coding agent named ``heal-bench-<run>-<scenario>-<n>`` (runs of different attempts never mix in
the store), its own checkpoint store and its own meter.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lousho.bench.heal.editors import Editors, Plan
from lousho.bench.heal.guard import PREFIX, Guard, Sql
from lousho.bench.heal.policy import Coder
from lousho.bench.heal.probe import BenchProbe, check_module
from lousho.bench.heal.project import Scorer
from lousho.bench.heal.runs import Meter, Metered, Runner
from lousho.improve.cycle import LoopSetup
from lousho.improve.options import StepOptions
from lousho.improve.records import Case
from lousho.improve.state import Paths, now_utc
from lousho.models.config import ModelConfig
from lousho.models.protocol import ModelClient
from lousho.models.script import ScriptRequest
from lousho.recover.store import open as open_store

AGENT_TEMPLATE = Path(__file__).parent / "agent"
SCRIPTED = "scripted"


@dataclass
class Switch:
    """A scripted model server's script whose policy the benchmark swaps per attempt."""

    policy: Callable[[ScriptRequest], Any] | None = None

    def __call__(self, request: ScriptRequest) -> Any:
        if self.policy is None:
            return "No attempt is running."
        return self.policy(request)


@dataclass(frozen=True)
class Live:
    """The live endpoints (``--live``): the agent's model and, optionally, the editors'."""

    model: ModelConfig
    editor: ModelConfig | None = None


@dataclass
class Bench:
    """What every attempt shares. Built by :func:`lousho.bench.heal.run.running`."""

    work: Path
    seed: int
    daemon_url: str
    sql: Sql
    agent_server: Any  # ScriptedModelServer
    editor_server: Any
    agent_switch: Switch
    editor_switch: Switch
    live: Live | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    _scorers: dict[tuple[tuple[str, str], ...], Scorer] = field(default_factory=dict, repr=False)

    def scorer(self, planted: dict[str, str] | None) -> Scorer:
        """One scorer per planted variant of the project for the whole run: its cache of verdicts by file
        bytes holds across attempts (the hidden tests are deterministic)."""
        key = tuple(sorted((planted or {}).items()))
        if key not in self._scorers:
            self._scorers[key] = Scorer(planted)
        return self._scorers[key]

    def attempt(self, scenario: str, index: int, *, live_agent: bool = False, live_editor: bool = False,
                planted: dict[str, str] | None = None) -> Attempt:
        return Attempt(self, scenario, index, live_agent=live_agent and self.live is not None,
                       live_editor=live_editor and self.live is not None, planted=planted)

    def guard(self) -> Guard:
        return Guard(self.sql)


class Attempt:
    """One attempt of one scenario: its directory, agent, models, meters and loop setup."""

    def __init__(self, bench: Bench, scenario: str, index: int, *, live_agent: bool, live_editor: bool,
                 planted: dict[str, str] | None) -> None:
        self.bench, self.scenario, self.index = bench, scenario, index
        self.seed = int(hashlib.sha256(f"{bench.seed}:{scenario}:{index}".encode()).hexdigest()[:8], 16)
        self.dir = bench.work / scenario / f"attempt-{index:02d}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.name = f"{PREFIX}{bench.tag}-{scenario}-{index:02d}"
        self.agent_dir = self.dir / "agent"
        shutil.copytree(AGENT_TEMPLATE, self.agent_dir, ignore=shutil.ignore_patterns("__pycache__"))
        toml = self.agent_dir / "agent.toml"
        toml.write_text(re.sub(r'(?m)^name = ".*"$', f'name = "{self.name}"', toml.read_text()), encoding="utf-8")
        self.meter, self.editor_meter = Meter(), Meter()
        self.editor_sent: list[str] = []  # every message text sent to the editor model in this attempt
        self.guard = bench.guard()
        self.editors: Editors | None = None
        live = bench.live
        if live_agent and live is not None:
            self.agent_model, self.agent_model_name = live.model, live.model.model
        else:
            self.agent_model, self.agent_model_name = ModelConfig(bench.agent_server.url, SCRIPTED), SCRIPTED
            bench.agent_server.reset()
            bench.agent_switch.policy = Coder(self.seed)
        self.live_editor = live_editor and live is not None
        if self.live_editor and live is not None:
            self.editor_model = live.editor or live.model
            self.editor_model_name = self.editor_model.model
        else:
            self.editor_model, self.editor_model_name = ModelConfig(bench.editor_server.url, SCRIPTED), SCRIPTED
            bench.editor_server.reset()
            bench.editor_switch.policy = None
        self.store = open_store(f"sqlite:///{self.dir / 'runs.db'}")
        self.scorer = bench.scorer(planted)
        self.runner = Runner(self.agent_model.client(bench.environ), self.agent_model_name, self.store, self.meter,
                             self.scorer, planted)
        self._provider: Any | None = None

    @property
    def paths(self) -> Paths:
        return Paths(self.agent_dir)

    def use_editors(self, plan: Plan, reflection: str = "NONE") -> None:
        """The scripted editors' plan for this attempt (ignored when the editors are live)."""
        self.editors = Editors(plan, reflection)
        if not self.live_editor:
            self.bench.editor_switch.policy = self.editors

    def editor_client(self) -> ModelClient:
        """The editors' client: metered, and guarded before every call."""
        inner = self.editor_model.client(self.bench.environ)
        return Metered(inner, (self.meter, self.editor_meter), before_call=self.guard, sent=self.editor_sent)

    def setup(self, cases: list[Case], *, observe: bool = False,
              on_run: Callable[[Case, int], None] | None = None, config: dict[str, Any] | None = None) -> LoopSetup:
        if config:
            from lousho.improve.state import write_json

            self.paths.ensure()
            write_json(self.paths.config, config)
        module = check_module(cases, BenchProbe(self.runner, on_run), f"heal-bench:{self.scenario}")
        options = StepOptions(model=self.agent_model, editor_model=self.editor_model,
                              observe=self.bench.daemon_url if observe else None)
        return LoopSetup(self.agent_dir, module, options, environ={},
                         editor_client=self.editor_client(), clock=now_utc)

    def provider(self) -> Any:
        """The attempt's exporter to the daemon (live traffic only; probe runs are not exported)."""
        if self._provider is None:
            from lousho.observe.client.export import instrument

            self._provider = instrument(self.name, self.bench.daemon_url, batch=True)
        return self._provider

    def flush(self) -> None:
        """Until every span sent so far is committed (the daemon acks after commit)."""
        if self._provider is not None:
            self._provider.force_flush()

    def close(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
        self.store.close()
        # The checkpoints of finished runs and their project copies: the attempt's evidence is in .lousho/.
        (self.dir / "runs.db").unlink(missing_ok=True)
        shutil.rmtree(self.agent_dir / "workspace", ignore_errors=True)

    def models(self) -> dict[str, str]:
        return {"agent_model": self.agent_model_name, "editor_model": self.editor_model_name}
