"""An ASGI layer against cross-site and DNS-rebinding access: the Host and Origin rules.

A web page the developer opens can make the browser send requests to the daemon. Two rules keep it
from reading or writing anything:

- ``Host``: a DNS-rebinding page reaches the daemon under its own name (``Host: evil.example``), so
  on a loopback bind only loopback names and addresses are accepted (127.0.0.0/8, ::1, localhost,
  any port). Beyond loopback the names in ``allowed_hosts`` (with loopback ones); none: any Host.
- ``Origin``: browsers send it on cross-site POSTs and fetches; a request that carries one must come
  from the daemon's own origin (its scheme and the Host it was asked under). OTLP exporters, curl and
  ``lousho sql`` send no Origin and are not affected.

Both refusals are 403 with a coded error, before the token check: nothing below runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from lousho.observe.config import is_loopback
from lousho.observe.receive.http_layers import header, send_error


class HostGuard:
    def __init__(
        self, app: ASGIApp, *, bind_host: str, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.app = app
        self._loopback_only = is_loopback(bind_host)
        self._allowed = frozenset(h.strip().lower().rstrip(".") for h in allowed_hosts if h.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = header(scope, b"host")
        if not self._host_allowed(host):
            await send_error(
                send, scope, 403, "LOUSHO_OBSERVE_FORBIDDEN_HOST",
                f"the Host {host!r} is not a name of this daemon",
                "ask for 127.0.0.1 or localhost; beyond loopback, start the daemon with "
                "--allowed-host NAME for each name clients use",
            )
            return
        origin = header(scope, b"origin")
        if origin is not None and origin.lower() != f"{scope.get('scheme', 'http')}://{host}".lower():
            await send_error(
                send, scope, 403, "LOUSHO_OBSERVE_FORBIDDEN_ORIGIN",
                f"requests from the web origin {origin!r} are refused",
                "only the daemon's own pages may send an Origin; call the API from a program, "
                "which sends none",
            )
            return
        await self.app(scope, receive, send)

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            # HTTP/1.1 requires Host (RFC 9112 §3.2); without one there is no name to check.
            return False
        name = host_name(host)
        if name is None:
            return False
        if is_loopback(name):
            return True
        if self._loopback_only:
            return False
        return not self._allowed or name in self._allowed


def host_name(host: str) -> str | None:
    """The name or address of a Host value, without port or IPv6 brackets, lowercased; None if
    malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0 or (host[end + 1:] and not _is_port(host[end + 1:])):
            return None
        return host[1:end]
    name, sep, port = host.partition(":")
    if sep and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_port(rest: str) -> bool:
    return rest.startswith(":") and rest[1:].isdigit()
