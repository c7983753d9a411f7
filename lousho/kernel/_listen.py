"""The listening socket our uvicorn servers (the observe daemon, the scripted model server) are handed.

A leaf module: it imports nothing of ours, so observe and models may both use it.
"""

from __future__ import annotations

import socket


def listen_tcp(host: str, port: int, backlog: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening; IPv6 when ``host`` has a colon.

    Raises the ``OSError`` of a failed bind or listen, after closing the socket; each caller turns it into
    its own coded error.

    The socket is made with ``IPPROTO_TCP`` spelt out, not left at 0. asyncio turns Nagle's algorithm off
    on each accepted connection only when the socket says it is TCP (``base_events._set_nodelay`` checks
    ``sock.proto``), and uvicorn writes a response's head and body in two sends. With Nagle on, the body
    waits for the client's delayed ACK of the head: about 40 ms on every call over a kept-alive
    connection, against well under a millisecond without.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
