"""The reference agent as the recover loop's app: ``lousho recover --app lousho.agent.recoverable:AgentApp``.

Each run stores what rebuilding its agent needs (directory, model URL and name, check module: never
a key), so one app resumes the runs of any agent directory in the store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lousho.agent.loop import RunResult
from lousho.agent.runner import AgentSetup, open_agent
from lousho.models.config import ModelConfig
from lousho.recover.errors import RunNotFound
from lousho.recover.store import DEFAULT_URL, RunStore
from lousho.recover.store import open as open_store


class AgentApp:
    """Resumes a run with the reference agent, under the lease epoch the loop holds.

    Configuration comes from the environment the CLI runs in (this object is what the CLI builds):
    the run store is the loop's (``lousho recover --store`` calls ``use_store_url``; else
    ``LOUSHO_STORE``), ``LOUSHO_OBSERVE`` (export spans there; else to the daemon the run stored, the
    one its first attempt exported to), ``LOUSHO_MODEL_URL`` / ``LOUSHO_MODEL`` (override the model
    the run stored), and the API key variable the model names.
    """

    def __init__(self, store: RunStore | str | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self._store = store if store is not None else self.environ.get("LOUSHO_STORE", DEFAULT_URL)

    def use_store_url(self, url: str) -> None:
        """``lousho recover --store URL`` calls this, so the app resumes runs of the loop's store."""
        self._store = url

    def resume(self, run_id: str, epoch: int) -> RunResult:
        store = open_store(self._store) if isinstance(self._store, str) else self._store
        try:
            record = store.get_run(run_id)
            if record is None:
                raise RunNotFound(run_id, store.location)
            payload = record.input if isinstance(record.input, dict) else {}
            stored = payload.get("setup") or {}
            model = ModelConfig(self.environ.get("LOUSHO_MODEL_URL") or stored.get("model_url") or "",
                                self.environ.get("LOUSHO_MODEL") or stored.get("model") or "")
            check = stored.get("check")
            setup = AgentSetup(Path(stored.get("agent_dir") or payload.get("agent_dir", "")), model,
                               store.location, self.environ.get("LOUSHO_OBSERVE") or stored.get("observe_url"),
                               self.environ.get("LOUSHO_TOKEN"), Path(check) if check else None)
            with open_agent(setup, self.environ, store=store) as agent:
                return agent.resume(run_id, epoch=epoch)
        finally:
            if isinstance(self._store, str):
                store.close()
