"""Faults the scripted model server can answer with, shaped like a real provider's errors.

A script returns one (``return Fault.rate_limit(retry_after=2)``), a test queues some
(``server.inject(Fault.status(503), times=3)``), or a JSON script or ``POST /_lousho/faults``
names one as ``{"fault": "status", "status": 503}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Bodies as OpenAI sends them, so the client classifies the scripted fault as it would the real one.
_DEFAULTS: dict[int, tuple[str, str, str | None]] = {
    400: ("Bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", "model_not_allowed"),
    404: ("The model does not exist.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The server is overloaded or not ready yet.", "server_error", None),
}


@dataclass(frozen=True)
class Fault:
    """An error answer (``kind`` "status"), or a delay before the answer (``kind`` "hang").

    Build with the class methods, not the constructor.
    """

    kind: str
    http_status: int = 200
    message: str | None = None
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    # After a hang: the reply to give (a string or a tool-call dict). None: an injected hang gives
    # the script's own reply; a hang the script returned gives empty text.
    then: Any = None

    @classmethod
    def status(cls, status: int, message: str | None = None) -> Fault:
        """Answer with this HTTP status and an OpenAI-shaped error body."""
        return cls("status", status, message)

    @classmethod
    def rate_limit(cls, retry_after: float | None = 2) -> Fault:
        """429 with ``Retry-After`` (seconds) when given."""
        headers = {} if retry_after is None else {"Retry-After": _number(retry_after)}
        return cls("status", 429, headers=headers)

    @classmethod
    def context_length(cls, limit: int = 8192) -> Fault:
        """400 with OpenAI's ``context_length_exceeded`` error code and message."""
        message = (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                   f"more tokens. Please reduce the length of the messages.")
        return cls("status", 400, message, error_code="context_length_exceeded")

    @classmethod
    def hang(cls, seconds: float, then: Any = None) -> Fault:
        """Sleep ``seconds`` (past the client's timeout), then answer ``then``."""
        return cls("hang", 200, seconds=float(seconds), then=then)

    def body(self) -> dict[str, Any]:
        """The JSON error body of a "status" fault."""
        message, kind, code = _DEFAULTS.get(self.http_status, ("Scripted error.", "server_error", None))
        if self.http_status >= 500 and self.http_status not in _DEFAULTS:
            kind = "server_error"
        return {"error": {"message": self.message or message, "type": kind, "param": None,
                          "code": self.error_code or code}}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (request log, ``POST /_lousho/faults``, JSON scripts); :meth:`from_dict` reads it."""
        if self.kind == "hang":
            data: dict[str, Any] = {"fault": "hang", "seconds": self.seconds}
            if self.then is not None:
                data["then"] = self.then
            return data
        data = {"fault": "status", "status": self.http_status}
        for key, value in (("message", self.message), ("error_code", self.error_code)):
            if value is not None:
                data[key] = value
        if self.headers:
            data["headers"] = dict(self.headers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fault:
        """Read ``{"fault": "status"|"rate_limit"|"context_length"|"hang", ...}``. Raises ValueError."""
        kind = data.get("fault")
        if kind == "status":
            status = data.get("status")
            if not isinstance(status, int) or not 400 <= status <= 599:
                raise ValueError(f"a status fault needs \"status\" between 400 and 599, got {status!r}")
            return cls("status", status, data.get("message"), data.get("error_code"),
                       {str(k): str(v) for k, v in (data.get("headers") or {}).items()})
        if kind == "rate_limit":
            return cls.rate_limit(data.get("retry_after", 2))
        if kind == "context_length":
            return cls.context_length(int(data.get("limit", 8192)))
        if kind == "hang":
            seconds = data.get("seconds")
            if not isinstance(seconds, int | float) or seconds < 0:
                raise ValueError(f"a hang fault needs \"seconds\" >= 0, got {seconds!r}")
            return cls.hang(seconds, data.get("then"))
        raise ValueError(f"unknown fault {kind!r}: expected status, rate_limit, context_length or hang")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
