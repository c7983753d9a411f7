"""A gzip body is every member of it (RFC 1952; ``gzip.decompress`` reads them all), however its bytes are
split across the request's chunks, and within the one inflation limit; bytes after the end that begin no
member are a 400. Only the first member was inflated: a 200 acked a body whose later spans were dropped."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import pytest

from lousho.observe.receive.http_layers import BodyLimit


def _post(body: bytes, encoding: str = "gzip", chunk: int = 7, limit: int = 1 << 20) -> tuple[int, bytes]:
    """``body`` through BodyLimit in chunks of ``chunk`` bytes; the status and what the app below got."""
    got: list[bytes] = []
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body[i : i + chunk], "more_body": i + chunk < len(body)}
                for i in range(0, len(body), chunk)]

    async def app(scope, receive, send) -> None:
        got.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/traces",
             "headers": [(b"content-encoding", encoding.encode()), (b"content-type", b"application/json")]}
    asyncio.run(BodyLimit(app, limit)(scope, receive, send))
    status = sent[0]["status"]
    return status, got[0] if status == 200 else b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_every_member_is_inflated_however_the_chunks_fall(chunk):
    members = gzip.compress(b"A" * 1000) + gzip.compress(b"B" * 1000) + b"\0" * 3 + gzip.compress(b"C" * 10)
    assert _post(members, chunk=chunk) == (200, gzip.decompress(members))


def test_the_limit_counts_every_member():
    members = gzip.compress(b"A" * 600) + gzip.compress(b"B" * 600)
    assert _post(members, limit=1000)[0] == 413


@pytest.mark.parametrize("trailing", [b"trailing garbage", gzip.compress(b"x")[:5]], ids=["garbage", "cut-short"])
def test_bytes_after_the_last_member_that_make_no_member_are_400(trailing):
    status, answer = _post(gzip.compress(b"A" * 1000) + trailing)
    assert status == 400
    assert json.loads(answer)["message"].startswith("LOUSHO_OBSERVE_BAD_ENCODING: ")


def test_bytes_after_a_deflate_stream_are_400():
    assert _post(zlib.compress(b"A" * 1000) + b"more", encoding="deflate")[0] == 400
    assert _post(zlib.compress(b"A" * 1000), encoding="deflate") == (200, b"A" * 1000)
