"""The server's end of a connection, read from the serving process itself (Linux: pidfd_getfd).

A test asserts a socket option of the connection a server accepted, rather than timing calls: the
option is the mechanism, a timing would be a flaky proxy for it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket

_PIDFD_GETFD = 438  # the same number on every Linux architecture (the unified syscall table)


def server_side_nodelay(pid: int, client: socket.socket) -> bool:
    """Whether the socket that process ``pid`` accepted for ``client``'s connection has Nagle off."""
    client_end = client.getsockname()
    sockets = _sockets_of(pid)
    try:
        for sock in sockets:
            if _peer(sock) == client_end:
                return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    finally:
        for sock in sockets:
            sock.close()
    raise AssertionError(f"process {pid} holds no socket connected to {client_end}")


def _peer(sock: socket.socket) -> object:
    try:
        return sock.getpeername()
    except OSError:  # a listening socket has no peer
        return None


def _sockets_of(pid: int) -> list[socket.socket]:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    found = []
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except FileNotFoundError:  # closed since the listing
                continue
            fd = libc.syscall(_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                error = ctypes.get_errno()
                if error == errno.EBADF:  # closed since the listing
                    continue
                raise OSError(error, f"pidfd_getfd({pid}, {name}): {os.strerror(error)}")
            sock = socket.socket(fileno=fd)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                found.append(sock)
            else:
                sock.close()
    finally:
        os.close(pidfd)
    return found
