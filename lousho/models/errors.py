"""Errors of the models part: the provider error taxonomy, and the scripted server's own errors.

A provider error has a ``category`` (one of :data:`CATEGORIES`) next to its ``code``. The recover
loop stores exactly ``{message, code, category, retryable}`` and rebuilds the error with
:meth:`ProviderError.from_dict`; its outage breaker counts only errors where
:func:`is_provider_failure` is true. The rules follow reference/lousho-internals.md §3.3
("Retryability, outage vs bad key"), with the deviations noted where they are made.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.kernel.errors import LoushoError, UsageError, retry_after_of

AUTH_FAILURE = "auth-failure"
RATE_LIMIT = "rate-limit"
TIMEOUT = "timeout"
CONTEXT_LENGTH = "context-length-exceeded"
UNKNOWN = "unknown"
CATEGORIES = (AUTH_FAILURE, RATE_LIMIT, TIMEOUT, CONTEXT_LENGTH, UNKNOWN)

# Error messages are capped like compactProviderError's (internals §3.3): 500 characters.
MAX_MESSAGE = 500


@dataclass(frozen=True)
class _Kind:
    category: str
    retryable: bool
    hint: str


# code -> what an error with that code is. Codes are data: the recover loop matches on them.
KINDS: dict[str, _Kind] = {
    "LOUSHO_PROVIDER_AUTH": _Kind(
        AUTH_FAILURE, False, "check the API key (the variable named by api_key_env) and that it may use this model"),
    "LOUSHO_PROVIDER_RATE_LIMIT": _Kind(
        RATE_LIMIT, True, "wait for the provider's Retry-After, then retry; lower the request rate"),
    "LOUSHO_PROVIDER_TIMEOUT": _Kind(
        TIMEOUT, True, "check that the model server is reachable and answering; raise the timeout for slow models"),
    "LOUSHO_PROVIDER_CONTEXT_LENGTH": _Kind(
        CONTEXT_LENGTH, False, "shorten the messages or tools: the same request will fail again"),
    "LOUSHO_PROVIDER_UNKNOWN": _Kind(
        UNKNOWN, True, "the provider failed on its side; retry later"),
    "LOUSHO_PROVIDER_BAD_REQUEST": _Kind(
        UNKNOWN, False, "the provider refused the request; check the model name, the messages and the tools"),
    # A 2xx whose body is not a chat completion. Like a non-API error in §3.3: unknown, not retryable
    # (a wrong base_url answers the same garbage every time; a cut-off body is a network error instead).
    "LOUSHO_PROVIDER_BAD_RESPONSE": _Kind(
        UNKNOWN, False, "the endpoint did not answer like an OpenAI-compatible chat API; check the base URL"),
}


class ProviderError(LoushoError):
    """A model call failed. Raised by :class:`~lousho.models.client.ChatClient`, one per request.

    ``category`` and ``retryable`` default from the code (see :data:`KINDS`); a stored error rebuilt
    by :meth:`from_dict` keeps the values it was stored with. ``status`` is the HTTP status (None
    for network failures) and ``retry_after`` the seconds the provider asked to wait (None if it
    did not say). The message never holds the API key.
    """

    code = "LOUSHO_PROVIDER_UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        code: str = "LOUSHO_PROVIDER_UNKNOWN",
        category: str | None = None,
        retryable: bool | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        hint: str | None = None,
    ) -> None:
        kind = KINDS.get(code, KINDS["LOUSHO_PROVIDER_UNKNOWN"])
        category = kind.category if category is None else category
        if category not in CATEGORIES:
            raise ValueError(f"category {category!r} is not one of {', '.join(CATEGORIES)}")
        super().__init__(
            message,
            code=code,
            hint=kind.hint if hint is None else hint,
            retryable=kind.retryable if retryable is None else retryable,
        )
        self.category = category
        self.status = status
        self.retry_after = retry_after

    @property
    def is_provider_failure(self) -> bool:
        """True when the provider, not this request, is at fault: what the outage breaker counts."""
        return is_provider_failure(self.category, self.retryable)

    def to_dict(self) -> dict[str, Any]:
        """The error's own fields: ``{message, code, category, retryable}``. The recover store adds
        ``retry_after`` when the provider said how long to wait (``lousho.recover.errors.stored_error``)."""
        return {"message": self.message, "code": self.code, "category": self.category, "retryable": self.retryable}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProviderError:
        """Rebuild from :meth:`to_dict`'s output (or a stored ``last_error``, keeping its ``retry_after``)."""
        return cls(str(data["message"]), code=str(data["code"]), category=data.get("category") or UNKNOWN,
                   retryable=bool(data["retryable"]), retry_after=retry_after_of(data))

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep category, status and retry_after through pickling (the base keeps only four fields).
        return (_rebuild_provider_error, (self.message, self.code, self.category, self.retryable, self.status,
                                          self.retry_after, self.hint))

    def __repr__(self) -> str:
        return (f"ProviderError(code={self.code!r}, category={self.category!r}, retryable={self.retryable!r}, "
                f"status={self.status!r}, message={self.message!r})")


def _rebuild_provider_error(message: str, code: str, category: str, retryable: bool, status: int | None,
                            retry_after: float | None, hint: str) -> ProviderError:
    return ProviderError(message, code=code, category=category, retryable=retryable, status=status,
                         retry_after=retry_after, hint=hint)


def is_provider_failure(category: str | None, retryable: bool) -> bool:
    """Does this error count towards an outage (3 in a row pause the recover loop, seed 000)?

    Rate limits, timeouts and network failures, and retryable unknowns (5xx) do. A bad key never
    does ("A bad API key doesn't count as an outage"), nor does a request the provider refused.
    Takes the stored fields so the breaker can judge a stored ``last_error`` without rebuilding it.
    """
    if category in (RATE_LIMIT, TIMEOUT):
        return True
    return category == UNKNOWN and retryable


# The message patterns of internals §3.3, tried in this order on a 4xx without a status of its own.
_AUTH = re.compile(r"unauthorized|invalid api key|incorrect api key|authentication|api key.*(missing|invalid|"
                   r"not found)|\bforbidden\b", re.I)
_RATE = re.compile(r"rate.?limit|too many requests", re.I)
_TIMEOUT = re.compile(r"\btimed?.?out\b|\betimedout\b|\babort(ed)?\b", re.I)
_CONTEXT = re.compile(r"context.length|context.window|context_length_exceeded|maximum context|max(?:imum)? tokens|"
                      r"too many tokens|reduce the length|prompt is too long", re.I)
# Key shapes that must never reach a message (internals §5.5 redacts the same ones).
_SECRET = re.compile(r"sk-[A-Za-z0-9_\-]{6,}|Bearer\s+\S+|AIza[0-9A-Za-z_\-]{20,}|ghp_[A-Za-z0-9]{20,}|"
                     r"AKIA[0-9A-Z]{16}")


def classify(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
) -> ProviderError:
    """Turn one HTTP error answer into a :class:`ProviderError`. Pure: the client's only classifier.

    - 401, 403: ``auth-failure``, not retryable.
    - 429: ``rate-limit``, retryable; ``retry_after`` from ``Retry-After`` (seconds or an HTTP date,
      or ``retry-after-ms``). None when absent: the recover loop's backoff decides then.
    - 408: ``timeout``, retryable.
    - 5xx: ``unknown``, retryable, whatever the text says. (§3.3 tries the message patterns here
      too; we don't, so that a 503 "authentication service unavailable" is not read as a bad key.)
    - any other 4xx: a context-length message or error code gives ``context-length-exceeded``
      (not retryable); else the AUTH, RATE and TIMEOUT patterns; else a bad request (``unknown``,
      not retryable).
    - anything else (a 1xx-3xx where a completion was expected): a bad response, not retryable.
    """
    head = _lower_headers(headers)
    detail, provider_code = _error_detail(body)
    message = _message(f"HTTP {status} from the model provider", detail, provider_code)
    retry_after = parse_retry_after(head.get("retry-after-ms"), head.get("retry-after"))

    def error(code: str) -> ProviderError:
        return ProviderError(message, code=code, status=status, retry_after=retry_after)

    if status in (401, 403):
        return error("LOUSHO_PROVIDER_AUTH")
    if status == 429:
        return error("LOUSHO_PROVIDER_RATE_LIMIT")
    if status == 408:
        return error("LOUSHO_PROVIDER_TIMEOUT")
    if status >= 500:
        return error("LOUSHO_PROVIDER_UNKNOWN")
    if 400 <= status < 500:
        text = f"{provider_code or ''} {detail}"
        for pattern, code in ((_CONTEXT, "LOUSHO_PROVIDER_CONTEXT_LENGTH"), (_AUTH, "LOUSHO_PROVIDER_AUTH"),
                              (_RATE, "LOUSHO_PROVIDER_RATE_LIMIT"), (_TIMEOUT, "LOUSHO_PROVIDER_TIMEOUT")):
            if pattern.search(text):
                return error(code)
        return error("LOUSHO_PROVIDER_BAD_REQUEST")
    return error("LOUSHO_PROVIDER_BAD_RESPONSE")


def network_error(where: str, exc: BaseException) -> ProviderError:
    """A request that got no HTTP answer: timeout, refused, reset, DNS. Category ``timeout``, retryable.

    ``where`` names the endpoint (a URL without credentials) so the message says what was unreachable.
    """
    what = "timed out" if isinstance(exc, TimeoutError) else f"failed: {type(exc).__name__}: {exc}"
    return ProviderError(redact(f"request to {where} {what}")[:MAX_MESSAGE], code="LOUSHO_PROVIDER_TIMEOUT")


def bad_response(where: str, why: str, status: int) -> ProviderError:
    """A 2xx answer that is not a chat completion (not JSON, no choices)."""
    return ProviderError(redact(f"{where} answered HTTP {status} but not with a chat completion: {why}")[:MAX_MESSAGE],
                         code="LOUSHO_PROVIDER_BAD_RESPONSE", status=status)


def parse_retry_after(ms: str | None, value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred: finer) or ``Retry-After`` (seconds or HTTP date)."""
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def redact(text: str, *secrets: str | None) -> str:
    """Replace key-shaped strings, and each given secret verbatim, with ``[REDACTED]``."""
    for secret in secrets:
        # A very short "key" would blank out ordinary words; real keys are long.
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[REDACTED]")
    return _SECRET.sub("[REDACTED]", text)


def _lower_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> dict[str, str]:
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    return {str(k).lower(): str(v) for k, v in items}


def _error_detail(body: bytes | str | Mapping[str, Any] | None) -> tuple[str, str | None]:
    """The provider's message and error code from an OpenAI-shaped ``{"error": {...}}`` body, or the raw text."""
    if body is None:
        return "", None
    doc: Any = body
    if isinstance(body, bytes | str):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            doc = json.loads(text)
        except ValueError:
            return text.strip(), None
    if not isinstance(doc, Mapping):
        return json.dumps(doc)[:MAX_MESSAGE], None
    error = doc.get("error", doc)
    if isinstance(error, str):
        return error, None
    if not isinstance(error, Mapping):
        return json.dumps(doc, sort_keys=True), None
    message = error.get("message") or error.get("detail") or json.dumps(error, sort_keys=True)
    code = error.get("code") or error.get("type")
    return str(message), None if code is None else str(code)


def _message(prefix: str, detail: str, provider_code: str | None) -> str:
    text = prefix
    if provider_code:
        text += f" ({provider_code})"
    if detail:
        text += f": {detail}"
    text = redact(text)
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "... (truncated)"
    return text


class ModelsError(LoushoError):
    """The base of the scripted model server's errors (not the provider's: those are ProviderError)."""

    code = "LOUSHO_MODELS_ERROR"


class _InFile:
    """Errors about one script file: they carry the path, and their hint names it."""

    _fix = "fix the script: a .py file defining respond(request), or a .json list of rules"

    def __init__(self, path: str | Path, detail: str) -> None:
        self.path = str(path)
        self.detail = detail
        LoushoError.__init__(self, f"script {self.path}: {detail}", hint=f"{self._fix} ({self.path})")  # type: ignore[arg-type]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.detail))


class ScriptError(_InFile, UsageError):
    """A script file the scripted server cannot load. A usage error: the CLI exits 2 (cannot run)."""

    code = "LOUSHO_MODELS_SCRIPT_INVALID"


class ScriptNotFound(ScriptError):
    code = "LOUSHO_MODELS_SCRIPT_NOT_FOUND"
    _fix = "check the path given to --script"


class ScriptNoRespond(ScriptError):
    code = "LOUSHO_MODELS_SCRIPT_NO_RESPOND"
    _fix = "define a function respond(request) in the script"


class ScriptRaised(_InFile, ModelsError):
    """The script raised, or returned something that is not a reply, while answering a request.

    The server answers that request with a 500 carrying this message, logs the traceback, and keeps serving.
    """

    code = "LOUSHO_MODELS_SCRIPT_RAISED"
    _fix = "fix respond() in the script; the server's log has the traceback"


class NoRuleMatched(_InFile, ModelsError):
    """No rule of a JSON script matched a request: answered like ScriptRaised, with a 500."""

    code = "LOUSHO_MODELS_NO_RULE_MATCHED"
    _fix = "add a rule without \"when\" at the end of the JSON script, as the default"


class ModelConfigInvalid(UsageError):
    code = "LOUSHO_MODELS_CONFIG_INVALID"
    hint = "give the model URL as http(s)://host[:port]/v1 and a positive timeout"


class ServerStartFailed(ModelsError):
    code = "LOUSHO_MODELS_START_FAILED"
    hint = "check --host and --port (a free port on an address of this machine), and the output above"


class RequestRefused(ModelsError):
    """A request the scripted server will not answer as sent: a 400 with this code, never a silent answer.

    ``param`` names the request field at fault (OpenAI's error ``param``), None when the request as a whole is.
    """

    code = "LOUSHO_MODELS_UNSUPPORTED_REQUEST"
    hint = "send what the server answers: see docs/models.md, \"What the scripted server answers\""

    def __init__(self, message: str, param: str | None = None, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.param = param

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_refused, (type(self), self.message, self.param, self.hint))

    def body(self) -> dict[str, Any]:
        """The OpenAI-shaped error body: the hint rides in the message, so every client shows it."""
        return {"error": {"message": f"{self.message}; hint: {self.hint}", "type": "invalid_request_error",
                          "param": self.param, "code": self.code}}


def _rebuild_refused(kind: type[RequestRefused], message: str, param: str | None, hint: str) -> RequestRefused:
    return kind(message, param, hint=hint)


class UnknownEndpoint(RequestRefused):
    code = "LOUSHO_MODELS_UNKNOWN_ENDPOINT"
    hint = "the scripted model server answers POST /v1/chat/completions and POST /v1/responses"


class PreviousResponseNotFound(RequestRefused):
    """``previous_response_id`` (or an ``item_reference`` input item) names no response or output item the server
    keeps: unknown, forgotten, or sent with store=false."""

    code = "LOUSHO_MODELS_PREVIOUS_RESPONSE_NOT_FOUND"
    hint = ("chain from a response this server gave since its last reset (it keeps the most recent 1024 "
            "stored ones), or send the whole conversation as input items")
