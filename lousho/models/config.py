"""Which model to call. Built by a CLI from its flags; the key's *name* lives here, never the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lousho.models.client import ChatClient, check_url
from lousho.models.errors import ModelConfigInvalid


@dataclass(frozen=True)
class ModelConfig:
    """An OpenAI-compatible endpoint: base ``url`` (``.../v1``), ``model`` name, where the key is, timeout.

    No module but a CLI reads the environment (STYLE 10): the CLI passes ``os.environ`` to
    :meth:`client`, everything else passes the config down.
    """

    url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0

    def __post_init__(self) -> None:
        check_url(self.url)
        if not self.model:
            raise ModelConfigInvalid("the model name is empty")
        if not self.timeout > 0:
            raise ModelConfigInvalid(f"timeout={self.timeout!r}: expected seconds > 0")

    def api_key(self, environ: Mapping[str, str]) -> str | None:
        """The key from ``environ[api_key_env]``; None when unset or empty (local servers need none)."""
        return environ.get(self.api_key_env) or None

    def client(self, environ: Mapping[str, str]) -> ChatClient:
        return ChatClient(self.url, self.model, api_key=self.api_key(environ), timeout=self.timeout)

