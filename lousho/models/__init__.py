"""models: OpenAI-compatible chat client, provider error taxonomy, the scripted model server.

The client is the official ``openai`` SDK, imported on the first call; ``ScriptedModelServer``
(starlette, uvicorn) is imported on first use, so an agent that only calls a model does not load a web server.
"""

from typing import Any

from lousho.models.client import ChatClient
from lousho.models.config import ModelConfig
from lousho.models.errors import CATEGORIES, ProviderError, classify, is_provider_failure
from lousho.models.faults import Fault
from lousho.models.protocol import ModelClient
from lousho.models.result import ChatResult, ToolCall, Usage

__all__ = [
    "CATEGORIES",
    "ChatClient",
    "ChatResult",
    "Fault",
    "ModelClient",
    "ModelConfig",
    "ProviderError",
    "ScriptedModelServer",
    "ToolCall",
    "Usage",
    "classify",
    "is_provider_failure",
]


def __getattr__(name: str) -> Any:
    if name == "ScriptedModelServer":
        from lousho.models.scripted import ScriptedModelServer

        return ScriptedModelServer
    raise AttributeError(f"module 'lousho.models' has no attribute {name!r}")
