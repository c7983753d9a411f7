"""Build an Agent from flags or from a stored run: directory, model, store, telemetry, check."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.agent import directory as agent_directory
from lousho.agent.errors import AgentDirInvalid, CheckInvalid
from lousho.agent.loop import Agent
from lousho.agent.verdict import Check
from lousho.models.config import ModelConfig
from lousho.recover.store import RunStore


@dataclass(frozen=True)
class AgentSetup:
    """Everything a run needs, as plain values: what the CLI builds and what a run stores to resume."""

    agent_dir: Path
    model: ModelConfig
    store_url: str
    observe_url: str | None = None
    observe_token: str | None = None
    check_path: Path | None = None
    # False: each span is exported as it ends, so a killed process loses none of the steps it finished.
    # True: batched, cheaper for many short runs in one process.
    batch_export: bool = False
    # How long a run this process holds stays claimable by nobody else after its last heartbeat.
    lease_seconds: float = 60.0

    def to_payload(self) -> dict[str, Any]:
        """The part of a run's input a resume needs (no secrets: the model key and the daemon's token stay in the
        environment). The observe URL is kept so that a resume exports to the daemon that holds the run's first
        attempt: without it `lousho runs` would only ever see the killed attempt."""
        return {"agent_dir": str(self.agent_dir), "model_url": self.model.url, "model": self.model.model,
                "check": str(self.check_path) if self.check_path else None, "observe_url": self.observe_url}


@contextmanager
def open_agent(setup: AgentSetup, environ: dict[str, str], store: RunStore | None = None) -> Iterator[Agent]:
    """An Agent whose telemetry is flushed when the block ends (the last spans reach the daemon)."""
    from lousho.recover.store import open as open_store

    directory = agent_directory.load(setup.agent_dir)
    own_store = store is None
    run_store = store if store is not None else open_store(setup.store_url)
    client = setup.model.client(environ)  # connects on first use: nothing to close if instrumenting fails
    provider = None
    if setup.observe_url:
        from lousho.observe.client.export import instrument

        provider = instrument(directory.name, setup.observe_url, token=setup.observe_token,
                              batch=setup.batch_export)
    try:
        yield Agent(directory, client, run_store, model_name=setup.model.model,
                    tracer_provider=provider, check=load_check(setup.check_path), hooks=directory.hooks,
                    lease_seconds=setup.lease_seconds)
    finally:
        client.close()
        if provider is not None:
            provider.shutdown()
        if own_store:
            run_store.close()


def load_check(path: Path | None) -> Check | None:
    """``check(input_text, output) -> Verdict`` from a Python file; None without one."""
    if path is None:
        return None
    try:
        module = agent_directory.exec_module(path, "check")
    except AgentDirInvalid as e:
        raise CheckInvalid(e.message) from None
    check = getattr(module, "check", None)
    if not callable(check):
        raise CheckInvalid(f"{path}: defines no check(input, output) function")
    return check
