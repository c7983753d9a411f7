"""An OpenAI-compatible chat client on the standard library: ``POST {base_url}/chat/completions``."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from lousho.models.errors import ModelConfigInvalid, bad_response, classify, network_error, redact
from lousho.models.protocol import Message, Tool
from lousho.models.result import ChatResult


class ChatClient:
    """One model behind an OpenAI-compatible endpoint; satisfies :class:`~lousho.models.protocol.ModelClient`.

    Each :meth:`complete` is exactly one HTTP request on a fresh connection, with no retries: the
    retry policy (backoff, quarantine, the outage breaker) belongs to the recover loop, which sees
    every failure as a classified :class:`ProviderError`. ``timeout`` bounds the connect and each
    read of the answer (as sockets do), not the whole call.

    The API key goes only into the ``Authorization`` header; reprs and error messages never show it.
    Safe to share between threads: it holds no connection or other mutable state.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        self._parts = check_url(base_url)
        if not timeout > 0:
            raise ModelConfigInvalid(f"timeout={timeout!r}: expected seconds > 0")
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self._api_key = api_key or None
        path = self._parts.path.rstrip("/") + "/chat/completions"
        self._path = f"{path}?{self._parts.query}" if self._parts.query else path
        # Where requests go, as messages show it: no user:password, no key.
        self.endpoint = self._parts._replace(netloc=_host_port(self._parts), query="").geturl().rstrip("/")
        self.endpoint += "/chat/completions"

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return f"ChatClient(base_url={self.endpoint[:-len('/chat/completions')]!r}, model={self.model!r}, " \
               f"api_key={key}, timeout={self.timeout!r})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None = None,
        *,
        temperature: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        """One chat completion. Raises :class:`ProviderError` on every failure (see ``classify``)."""
        body = self.request_body(messages, tools, temperature=temperature, seed=seed, max_tokens=max_tokens)
        status, headers, payload = self._post(json.dumps(body).encode())
        if not 200 <= status < 300:
            # The provider may echo the key back: classify redacts key shapes, this the exact key.
            raise classify(status, redact(payload.decode("utf-8", "replace"), self._api_key), headers)
        try:
            return ChatResult.from_response(json.loads(payload))
        except ValueError as e:
            raise bad_response(self.endpoint, redact(str(e), self._api_key), status) from None

    def request_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None = None,
        *,
        temperature: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """The JSON body :meth:`complete` sends; optional fields appear only when given."""
        body: dict[str, Any] = {"model": self.model, "messages": _objects("messages", messages)}
        if tools:
            body["tools"] = _objects("tools", tools)
        for name, value in (("temperature", temperature), ("seed", seed), ("max_tokens", max_tokens)):
            if value is not None:
                body[name] = value
        return body

    def _post(self, data: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Connection": "close"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        conn = self._connection()
        try:
            conn.request("POST", self._path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        except (OSError, http.client.HTTPException) as e:
            # No (complete) HTTP answer: refused, reset, DNS, timed out, cut off. All "timeout" (§3.3).
            raise network_error(self.endpoint, e) from None
        finally:
            conn.close()

    def _connection(self) -> http.client.HTTPConnection:
        host, port = self._parts.hostname or "", self._parts.port
        if self._parts.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(host, port, timeout=self.timeout)


def _objects(what: str, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # A caller's bug, not the provider's: TypeError (the ModelClient contract), before any request.
    if isinstance(items, str | bytes | Mapping) or not all(isinstance(item, Mapping) for item in items):
        raise TypeError(f"{what} must be a list of objects (dicts)")
    return [dict(item) for item in items]


def check_url(url: str) -> urllib.parse.SplitResult:
    """Parse a base URL, refusing anything but http(s)://host[:port]/path. Messages omit credentials."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelConfigInvalid(f"model URL {parts.scheme}://{parts.hostname or ''}{parts.path} "
                                 "is not http(s)://host[:port]/path")
    try:
        parts.port  # noqa: B018 (the property raises ValueError on a bad port)
    except ValueError as e:
        raise ModelConfigInvalid(f"model URL has a bad port: {e}") from None
    return parts


def _host_port(parts: urllib.parse.SplitResult) -> str:
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host

