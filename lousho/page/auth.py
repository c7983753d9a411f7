"""ASGI layers in front of the page: the token (header, cookie or a one-time query) and the security headers.

The page follows the API's token rule (DESIGN §3: with ``--token``, every endpoint but /healthz needs
it), with one addition a browser needs, since it cannot send a header on a link:

- ``Authorization: Bearer T`` is accepted, as on the API;
- ``GET /any/page?token=T`` once: the answer is a 303 to the same address without ``token`` that sets
  the cookie ``lousho_page`` (HttpOnly, SameSite=Strict, Path=/), and later pages send that cookie.
  The redirect keeps the token out of the address bar, the history and, with ``Referrer-Policy:
  no-referrer``, out of any Referer;
- the cookie holds an HMAC of the token, not the token itself: it opens the page and nothing else
  (the API still asks for the bearer header), and it stops working when the daemon's token changes.

Without a token configured the layer lets everything through, as the API's does.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lousho.observe.receive.http_layers import bearer_matches

COOKIE = "lousho_page"
_COOKIE_CONTEXT = b"lousho observe page cookie v1"

# No script may run and nothing may load from outside the daemon (issue 9: "no page may fetch from
# outside the daemon"); the page is plain HTML with a same-origin stylesheet and inline SVG.
CSP = (
    "default-src 'self'; script-src 'none'; object-src 'none'; style-src 'self'; img-src 'self'; "
    "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    # Pages show live state and may show model text: never keep them in a shared or disk cache.
    (b"cache-control", b"no-store"),
)


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), _COOKIE_CONTEXT, hashlib.sha256).hexdigest()


class SecurityHeaders:
    """Adds the CSP and its companions to every answer of the app below, 401s included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + list(SECURITY_HEADERS)}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class PageToken:
    """The page's token check (see the module docstring); ``token`` None lets every request through."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._cookie = cookie_value(token).encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._token is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if bearer_matches(headers.get("authorization"), self._token):
            await self.app(scope, receive, send)
            return
        query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for key, value in query if key == "token"]
        if given:
            if hmac.compare_digest(given[-1].encode(), self._token):
                await self._redirect_with_cookie(scope, send, [(k, v) for k, v in query if k != "token"])
            else:
                await _unauthorized(send, "wrong token")
            return
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE, "")
        if self._cookie is not None and hmac.compare_digest(cookie.encode(), self._cookie):
            await self.app(scope, receive, send)
            return
        await _unauthorized(send, "this daemon needs its token")

    async def _redirect_with_cookie(self, scope: Scope, send: Send, query: list[tuple[str, str]]) -> None:
        # Only ever our own path: collapsing leading slashes keeps "//host/x" from becoming a
        # protocol-relative redirect to another site.
        raw = scope.get("raw_path") or urllib.parse.quote(scope.get("path", "/")).encode()
        location = "/" + raw.decode("latin-1").lstrip("/")
        if query:
            location += "?" + urllib.parse.urlencode(query)
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = f"{COOKIE}={self._cookie.decode() if self._cookie else ''}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await send({
            "type": "http.response.start", "status": 303,
            "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode()),
                        (b"content-length", b"0")],
        })
        await send({"type": "http.response.body", "body": b""})


async def _unauthorized(send: Send, why: str) -> None:
    body = (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>lousho · token needed</title>"
        "</head><body><h1>401: " + why + "</h1><p>Open this page once as <code>/?token=T</code> with the "
        "daemon's <code>--token</code> (the address then drops the token and a cookie keeps you signed in), "
        "or send <code>Authorization: Bearer T</code>.</p></body></html>"
    ).encode()
    await send({
        "type": "http.response.start", "status": 401,
        "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer")],
    })
    await send({"type": "http.response.body", "body": body})
