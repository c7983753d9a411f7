"""The chat client: the official ``openai`` SDK against any OpenAI-compatible ``{base_url}/chat/completions``.

The SDK owns the HTTP (connection pooling, TLS, timeouts); lousho owns the policy. Its retries are
off (``max_retries=0``): the recover loop decides when a failed call is tried again, from the
classified error this module raises. The answer is read as raw JSON and parsed by
:meth:`ChatResult.from_response`, so a result and its ``raw`` are exactly what the provider sent.
"""

from __future__ import annotations

import sys
import threading
import urllib.parse
import weakref
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from lousho.models.errors import ModelConfigInvalid, bad_response, classify, network_error, redact
from lousho.models.protocol import Message, Tool
from lousho.models.result import ChatResult


class ChatClient:
    """One model behind an OpenAI-compatible endpoint; satisfies :class:`~lousho.models.protocol.ModelClient`.

    Each :meth:`complete` is exactly one HTTP request, with no retries: the retry policy (backoff,
    quarantine, the outage breaker) belongs to the recover loop, which sees every failure as a
    classified :class:`ProviderError` carrying the provider's ``Retry-After``. ``timeout`` bounds the
    connect and each read of the answer, not the whole call. Connections are reused between calls.

    A query string on the base URL (Azure-style ``...?api-version=...``) is sent with every request.
    The API key goes only into the ``Authorization`` header; reprs and error messages never show it.
    Safe to share between threads: the SDK client is created once, on first use, under a lock.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        self._parts = check_url(base_url)
        if not timeout > 0:
            raise ModelConfigInvalid(f"timeout={timeout!r}: expected seconds > 0")
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self._api_key = api_key or None
        # Where requests go, as messages show it: no user:password, no key.
        self.endpoint = self._parts._replace(netloc=_host_port(self._parts), query="").geturl().rstrip("/")
        self.endpoint += "/chat/completions"
        self._sdk: Any = None
        self._closer: weakref.finalize | None = None
        self._lock = threading.Lock()

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
        import openai

        options = {"temperature": temperature, "seed": seed, "max_tokens": max_tokens}
        body = _body(self.model, messages, tools, options)
        try:
            # Without a key the request says so (an omitted Authorization): the SDK refuses to send one
            # with no auth at all unless told, and local servers need none.
            extra = {} if self._api_key else {"headers": {"Authorization": openai.Omit()}}
            # The body is already the API's JSON: sent as it is (the SDK's documented way for a body of one's
            # own), not through the typed ``create``, whose walk over the messages and tools' schemas cost
            # 3 ms of CPU a call on a 13-message conversation with 5 tools, as much as the rest of the call.
            response = self._client().post("/chat/completions", cast_to=_response_class(), body=body,
                                           options=extra)
        except openai.APIStatusError as e:
            # The provider may echo the key back: classify redacts key shapes, this the exact key.
            response = e.response
            raise classify(response.status_code, redact(response.text, self._api_key),
                           list(response.headers.items())) from None
        except openai.APIError as e:
            # No (complete) HTTP answer: refused, reset, DNS, timed out, cut off. All "timeout" (§3.3).
            raise network_error(self.endpoint, _cause(e)) from None
        try:
            return ChatResult.from_response(response.json())
        except ValueError as e:
            raise bad_response(self.endpoint, redact(str(e), self._api_key), response.status_code) from None

    def close(self) -> None:
        """Close the pooled connections (a later call opens new ones)."""
        with self._lock:
            self._sdk, closer, self._closer = None, self._closer, None
        if closer is not None:
            closer()

    def _client(self) -> Any:
        with self._lock:
            if self._sdk is None:
                self._sdk = _sdk_client(self._parts, self._api_key, self.timeout)
                # A client nobody closed closes its connections when it is collected. Without this, one collected
                # in a reference cycle left the order to the collector, which could finalize a pooled socket
                # before the SDK's own clean-up closed it ("ResourceWarning: unclosed socket"). The finalizer
                # holds the SDK, so its sockets are never part of that cycle, and runs before any finalizer in it.
                self._closer = weakref.finalize(self, self._sdk.close)
            return self._sdk


def _sdk_client(parts: urllib.parse.SplitResult, api_key: str | None, timeout: float) -> Any:
    import openai

    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return openai.OpenAI(
        # Without a key, a provider of the empty key: the SDK then sends no Authorization header (local
        # servers need none) and neither refuses to start nor falls back to OPENAI_API_KEY (STYLE 10:
        # only a CLI reads the environment; ModelConfig names the variable).
        api_key=api_key if api_key else _no_key,
        base_url=parts._replace(query="", fragment="").geturl(),
        default_query=query or None,
        max_retries=0,
        # A plain number: the SDK's HTTP package differs between its major versions (httpx, then httpx2).
        timeout=float(timeout),
    )


def _body(model: str, messages: Sequence[Message], tools: Sequence[Tool] | None,
          options: Mapping[str, float | int | None]) -> dict[str, Any]:
    """The JSON body of a chat request: tools only when there are some, options only when given."""
    body: dict[str, Any] = {"model": model, "messages": _objects("messages", messages)}
    if tools:
        body["tools"] = _objects("tools", tools)
    body.update((name, value) for name, value in options.items() if value is not None)
    return body


@cache
def _response_class() -> type:
    """The response class of the SDK's HTTP package (httpx, or httpx2 from openai 3 on): asked for it, ``post``
    gives the answer as received, which ``ChatResult.from_response`` parses."""
    import openai

    for cls in openai.DefaultHttpxClient.__mro__:
        package = cls.__module__.partition(".")[0]
        if package != "openai":
            response_class: type = sys.modules[package].Response
            return response_class
    raise RuntimeError("the openai SDK's HTTP client is of no known package")


def _no_key() -> str:
    return ""


def _cause(error: BaseException) -> BaseException:
    """The network failure under the SDK's wrapper, so the message says what went wrong (refused, DNS)."""
    import openai

    if isinstance(error, openai.APITimeoutError):
        return TimeoutError("timed out")
    cause = error.__cause__ or error.__context__
    return cause if cause is not None else error


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

