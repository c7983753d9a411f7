"""ASGI layers in front of the daemon's routes: the bearer token, and the body limit with gzip.

Each wraps an ASGI app and is one itself, so each can be tested alone (Starlette's middleware
pattern). Error bodies follow the path: OTLP endpoints answer with a ``google.rpc.Status``, in the
request's encoding (OTLP/HTTP "Failures"); the rest answer JSON.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from google.protobuf import json_format
from google.rpc import status_pb2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OTLP_PATHS = frozenset({"/v1/traces"})
PUBLIC_PATHS = frozenset({"/healthz"})

# grpc status codes used in google.rpc.Status bodies.
GRPC_INVALID_ARGUMENT = 3
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_UNAUTHENTICATED = 16
GRPC_UNAVAILABLE = 14
GRPC_INTERNAL = 13


def is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def error_response_parts(
    path: str, content_type: str, code: str, message: str, hint: str = "", grpc_code: int = 3
) -> tuple[bytes, str]:
    """The body and content type of an error answer for ``path``."""
    if path in OTLP_PATHS:
        status = status_pb2.Status(code=grpc_code, message=f"{code}: {message}")
        if is_json(content_type):
            return json_format.MessageToJson(status).encode(), "application/json"
        return status.SerializeToString(), "application/x-protobuf"
    body = {"error": {"code": code, "message": message, "hint": hint}}
    return json.dumps(body, sort_keys=True).encode(), "application/json"


async def send_error(
    send: Send,
    scope: Scope,
    status: int,
    code: str,
    message: str,
    hint: str = "",
    grpc_code: int = GRPC_INVALID_ARGUMENT,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = _headers(scope)
    body, ctype = error_response_parts(
        scope.get("path", ""), headers.get("content-type", ""), code, message, hint, grpc_code
    )
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype.encode()),
                (b"content-length", str(len(body)).encode()),
                *(extra_headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BearerToken:
    """Every path but /healthz needs ``Authorization: Bearer <token>`` when a token is set."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._expected = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._expected is None
            or scope["type"] != "http"
            or scope.get("path") in PUBLIC_PATHS
        ):
            await self.app(scope, receive, send)
            return
        if not bearer_matches(header(scope, b"authorization"), self._expected):
            await send_error(
                send, scope, 401, "LOUSHO_OBSERVE_UNAUTHORIZED",
                "missing or wrong bearer token",
                "send `Authorization: Bearer <token>` with the daemon's token",
                GRPC_UNAUTHENTICATED, [(b"www-authenticate", b"Bearer")],
            )
            return
        await self.app(scope, receive, send)


def bearer_matches(authorization: str | None, expected: bytes) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <expected>``. The scheme is case-insensitive
    (RFC 7235 §2.1); the token is compared in constant time."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    is_bearer = scheme.lower() == "bearer"
    # Compared even when the scheme is wrong, so the timing says nothing about the token.
    same = hmac.compare_digest(given.strip().encode("latin-1", "replace"), expected)
    return is_bearer and same


class BodyBudget(Protocol):
    """Bytes of bodies in memory, shared with the writer's admission queue (``Writer``)."""

    def reserve(self, nbytes: int, held: int = 0) -> bool: ...

    def release(self, nbytes: int) -> None: ...


class BodyLimit:
    """Read the whole body, inflate gzip/deflate, and refuse with 413 past ``limit`` bytes.

    The limit holds after decompression (OTLP: "including after decompression"), and inflating
    stops as soon as it is passed, so a gzip bomb costs at most ``limit`` bytes of memory. The app
    below sees the plain body and no Content-Encoding.

    Against slow or stalled uploads: the body must arrive within ``timeout_s`` (408), and the bytes
    buffered so far are reserved in ``budget`` as they arrive, so that many uploads at once get 503 +
    Retry-After when the budget is spent instead of each holding up to ``limit``. The reservation is
    released when the body is handed on: from there the writer's admission check counts it.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        *,
        budget: BodyBudget | None = None,
        timeout_s: float | None = None,
        retry_after_s: int = 1,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self._budget = budget
        self._timeout_s = timeout_s
        self._retry_after_s = retry_after_s
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
            await send_error(
                send, scope, 415, "LOUSHO_OBSERVE_UNSUPPORTED_ENCODING",
                f"Content-Encoding {encoding!r} is not supported",
                "send identity, gzip or deflate",
            )
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, send)
            return
        reading = _Reading(self._budget)
        try:
            raw = await self._read(scope, receive, send, encoding, reading)
        finally:
            reading.release()
        if raw is None:
            return
        # Handed on once and not kept: the app may drop the body as soon as it has decoded it, and no
        # reference here keeps it alive until the ack (a 50k-span body is 17 MiB).
        body = [b"".join(reading.chunks)]
        reading.chunks.clear()
        scope = dict(scope)
        scope["headers"] = [
            (k, v) for k, v in scope["headers"]
            if k.lower() not in (b"content-encoding", b"content-length")
        ] + [(b"content-length", str(len(body[0])).encode())]
        scope["lousho.wire_bytes"] = raw

        async def replay() -> Message:
            if body:
                return {"type": "http.request", "body": body.pop(), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(
        self, scope: Scope, receive: Receive, send: Send, encoding: str, reading: _Reading
    ) -> int | None:
        """Read the body into ``reading.chunks``; the wire byte count, or None once answered."""
        inflater = None
        if encoding in ("gzip", "x-gzip", "deflate"):
            inflater = _Inflater(gzip=encoding != "deflate")
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        size = 0
        raw = 0
        while True:
            try:
                message = await _receive_by(receive, deadline)
            except TimeoutError:
                await send_error(
                    send, scope, 408, "LOUSHO_OBSERVE_BODY_TIMEOUT",
                    f"the body did not arrive within {self._timeout_s:g} s",
                    "send the whole request at once; the daemon's --body-timeout sets the limit",
                    GRPC_UNAVAILABLE, [(b"connection", b"close")],
                )
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            raw += len(chunk)
            if raw > self.limit:
                await self._too_large(scope, send)
                return None
            produced: list[bytes] | None = [chunk] if chunk else []
            if inflater is not None and chunk:
                try:
                    produced, size = _inflate(inflater, chunk, size, self.limit)
                except zlib.error as e:
                    await send_error(
                        send, scope, 400, "LOUSHO_OBSERVE_BAD_ENCODING",
                        f"the body is not valid {encoding}: {e}",
                    )
                    return None
                if produced is None:
                    await self._too_large(scope, send)
                    return None
            elif chunk:
                size += len(chunk)
            assert produced is not None
            if not reading.take(produced):
                await self._busy(scope, send)
                return None
            if not message.get("more_body", False):
                break
        if inflater is not None and not inflater.eof and raw:
            await send_error(
                send, scope, 400, "LOUSHO_OBSERVE_BAD_ENCODING",
                f"the {encoding} body is truncated",
            )
            return None
        return raw

    async def _busy(self, scope: Scope, send: Send) -> None:
        if self._on_refused is not None:
            self._on_refused()
        await send_error(
            send, scope, 503, "LOUSHO_OBSERVE_BUSY",
            "the daemon's byte budget for bodies and queued requests is spent",
            "retry after the Retry-After delay", GRPC_UNAVAILABLE,
            [(b"retry-after", str(self._retry_after_s).encode()), (b"connection", b"close")],
        )

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await send_error(
            send, scope, 413, "LOUSHO_OBSERVE_TOO_LARGE",
            f"the body is over the {self.limit} byte limit (after decompression)",
            "send smaller batches (the OTel SDK's default batch of 512 spans is far below it)",
        )


class _Reading:
    """The chunks of one body being read, and the bytes of them reserved in the budget."""

    def __init__(self, budget: BodyBudget | None) -> None:
        self.chunks: list[bytes] = []
        self._budget = budget
        self._held = 0

    def take(self, pieces: list[bytes]) -> bool:
        nbytes = sum(len(p) for p in pieces)
        if self._budget is not None and nbytes:
            if not self._budget.reserve(nbytes, self._held):
                return False
            self._held += nbytes
        self.chunks.extend(pieces)
        return True

    def release(self) -> None:
        if self._budget is not None and self._held:
            self._budget.release(self._held)
            self._held = 0


async def _receive_by(receive: Receive, deadline: float | None) -> Message:
    if deadline is None:
        return await receive()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    return await asyncio.wait_for(receive(), remaining)


class _Inflater:
    """A body's inflater: for gzip every member in turn (RFC 1952 lets members follow one another, and
    ``gzip.decompress`` reads them all: reading the first alone acked a body whose later spans were dropped),
    with zero padding between them allowed as ``gzip`` allows it; deflate is one stream. Bytes after the
    end that are neither raise ``zlib.error`` (a 400)."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self.stream = self._new()

    def _new(self) -> Any:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    @property
    def eof(self) -> bool:
        """Whether the body read so far ends where a stream (a member) ends."""
        return bool(self.stream.eof)

    def after_end(self, data: bytes) -> bytes:
        """``data`` found past the end of a stream: what begins the next member (a new stream then inflates
        it), or nothing (padding)."""
        if not self._gzip:
            raise zlib.error("data after the end of the deflate stream")
        rest = data.lstrip(b"\0")
        if rest:
            self.stream = self._new()
        return rest


def _inflate(
    inflater: _Inflater, chunk: bytes, size: int, limit: int
) -> tuple[list[bytes] | None, int]:
    """Inflate ``chunk`` in bounded steps; None when the output would pass ``limit`` (all members count)."""
    out: list[bytes] = []
    data = chunk
    step = 1 << 20
    while data:
        if inflater.eof:
            data = inflater.after_end(data)
            if not data:
                break
        stream = inflater.stream
        piece = stream.decompress(data, min(step, limit - size + 1))
        size += len(piece)
        if size > limit:
            return None, size
        out.append(piece)
        data = stream.unused_data if stream.eof else stream.unconsumed_tail
    return out, size


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
