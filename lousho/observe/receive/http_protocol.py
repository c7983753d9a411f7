"""uvicorn's h11 protocol with a header read timeout, which uvicorn 0.54 does not have.

Without it a client that connects and sends half a request line, or half its headers, holds its
connection (and a file descriptor) forever; a thousand of them used to lock everyone out. Here a
request head must be complete within ``header_timeout`` seconds of its first byte (of the
connection, for the first request), or the connection is closed without an answer: there is no
request to answer yet. Idle keep-alive connections are uvicorn's ``timeout_keep_alive``.

The other way round, a client that asks and never reads would pin its answer in memory (the
transport's buffer, the app's body) for ever. Once the transport's write buffer is full (uvicorn
pauses writing), the client must take some of it within ``send_timeout`` seconds, again and again
until it is drained, or the connection is aborted and the buffer dropped.
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
    send_timeout: float = 30.0

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._unsent = 0

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
        self._stop_send_clock()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._start_send_clock()

    def resume_writing(self) -> None:
        self._stop_send_clock()
        super().resume_writing()

    def _start_send_clock(self) -> None:
        self._stop_send_clock()
        self._unsent = self.transport.get_write_buffer_size()
        self._send_deadline = self.loop.call_later(self.send_timeout, self._send_timed_out)

    def _stop_send_clock(self) -> None:
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None

    def _send_timed_out(self) -> None:
        self._send_deadline = None
        if self.transport.get_write_buffer_size() < self._unsent:
            self._start_send_clock()  # slow, but reading: another period
        else:
            # abort, not close: close would keep the buffer until a client that reads nothing reads it.
            self.transport.abort()

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


def protocol_with_header_timeout(seconds: float, send_timeout: float = 30.0) -> type[HeaderTimeoutProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with this header timeout (and send timeout)."""
    return type("LoushoHttpProtocol", (HeaderTimeoutProtocol,),
                {"header_timeout": seconds, "send_timeout": send_timeout})
