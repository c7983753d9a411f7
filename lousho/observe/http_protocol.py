"""uvicorn's h11 protocol with a header read timeout, which uvicorn 0.54 does not have.

Without it a client that connects and sends half a request line, or half its headers, holds its
connection (and a file descriptor) forever; a thousand of them used to lock everyone out. Here a
request head must be complete within ``header_timeout`` seconds of its first byte (of the
connection, for the first request), or the connection is closed without an answer: there is no
request to answer yet. Idle keep-alive connections are uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState


class HeaderTimeoutProtocol(H11Protocol):
    header_timeout: float = 10.0

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_head():
            # The first bytes of a new request on a kept-alive connection start its clock.
            if self._head_deadline is None and data:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self._awaiting_head():
            self.transport.close()


def protocol_with_header_timeout(seconds: float) -> type[HeaderTimeoutProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with this header timeout."""
    return type("LoushoHttpProtocol", (HeaderTimeoutProtocol,), {"header_timeout": seconds})
