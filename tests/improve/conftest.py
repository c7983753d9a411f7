from __future__ import annotations

from collections.abc import Iterator

import pytest
from improve_support import agent_policy

from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer


@pytest.fixture(scope="module")
def agent_model() -> Iterator[ModelConfig]:
    """The agent's scripted model over real HTTP (its policy is deterministic, so one per module)."""
    with ScriptedModelServer(agent_policy, seed=1) as server:
        yield ModelConfig(server.url, "agent")
