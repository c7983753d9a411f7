from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_support import EXAMPLE

from lousho.models.scripted import ScriptedModelServer


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    """The example agent's scripted model, over real HTTP."""
    with ScriptedModelServer(EXAMPLE / "model.py", seed=3) as server:
        yield server
