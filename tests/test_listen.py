"""The listening socket of our uvicorn servers."""

from __future__ import annotations

import asyncio
import socket

from lousho.kernel._listen import listen_tcp


def test_connections_asyncio_accepts_on_it_have_nagle_off() -> None:
    """asyncio disables Nagle only on sockets whose proto says TCP; without it every kept-alive
    response whose head and body go out in two sends waits for a delayed ACK."""

    async def accepted_nodelay() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Record(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = listen_tcp("127.0.0.1", 0, backlog=8)
        server = await asyncio.get_running_loop().create_server(Record, sock=listening)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", listening.getsockname()[1])
            try:
                return await asyncio.wait_for(accepted, 10)
            finally:
                writer.close()

    assert asyncio.run(accepted_nodelay()) != 0

