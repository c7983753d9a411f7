"""The boundary the agent and the improve loop call: any chat model that answers like OpenAI's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from lousho.models.result import ChatResult

# OpenAI shapes: a message has role, content, and tool_calls (assistant) or tool_call_id (tool);
# a tool is {"type": "function", "function": {"name", "description", "parameters"}}.
Message = Mapping[str, Any]
Tool = Mapping[str, Any]


@runtime_checkable
class ModelClient(Protocol):
    """A chat model. :class:`~lousho.models.client.ChatClient` is the HTTP one.

    Contract:

    - ``complete`` makes exactly one model call: no retries, no fallbacks. Retrying is the recover
      loop's job, which knows about backoff, quarantine and outages (DESIGN §5).
    - Every failure of the call raises :class:`~lousho.models.errors.ProviderError` with a
      ``category``; the caller decides from ``retryable`` and ``is_provider_failure``.
      A programming error (a message that is not JSON-serialisable) raises TypeError instead.
    - It may be called from several threads at once, and it does not mutate its arguments.
    - ``temperature``, ``seed`` and ``max_tokens`` are sent only when given.
    """

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None = None,
        *,
        temperature: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult: ...
