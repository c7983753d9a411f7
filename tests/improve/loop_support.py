"""Loop setups for tests: the agent and check of improve_support, the scripted models, a clock to move."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from improve_support import agent_policy, editor_script, make_agent

from lousho.improve.cycle import LoopSetup
from lousho.improve.options import StepOptions
from lousho.improve.state import Paths
from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 11, 2, 9, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@contextmanager
def loop(tmp_path: Path, plans: dict[str, Any], *, config: dict[str, Any] | None = None, agent_script: Any = None,
         cases: list[dict[str, Any]] | None = None, observe: str | None = None,
         clock: Callable[[], datetime] | None = None,
         ) -> Iterator[tuple[LoopSetup, ScriptedModelServer, ScriptedModelServer]]:
    agent, check = make_agent(tmp_path, cases)
    if config:
        Paths(agent).ensure()
        Paths(agent).config.write_text(json.dumps(config))
    with ScriptedModelServer(agent_script or agent_policy) as model, \
            ScriptedModelServer(editor_script(plans)) as editor:
        options = StepOptions(model=ModelConfig(model.url, "agent"), editor_model=ModelConfig(editor.url, "editor"),
                              observe=observe)
        yield LoopSetup(agent, check, options, environ={}, clock=clock or Clock()), model, editor


def files(agent: Path) -> dict[str, bytes]:
    return {p.relative_to(agent).as_posix(): p.read_bytes() for p in sorted(agent.rglob("*"))
            if p.is_file() and ".lousho" not in p.parts and "__pycache__" not in p.parts}


def audit_actions(agent: Path) -> list[str]:
    return [json.loads(line)["action"] for line in Paths(agent).audit.read_text().splitlines()]
