"""Shared fixtures: a real daemon on free loopback ports and a plain HTTP client."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lousho.observe.process import DaemonProcess, start_daemon

# No autouse random.seed here: the OTel SDK draws trace and span ids from the global `random`, so
# reseeding it per test makes each test send the previous test's ids, which the daemon rightly
# stores once. Tests that need reproducible randomness use their own random.Random(seed).


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def post(url: str, path: str, body: bytes, content_type: str, **headers: str) -> Reply:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", path, body=body, headers={"content-type": content_type, **headers})
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def get(url: str, path: str, **headers: str) -> Reply:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def sql(url: str, query: str, params: list | None = None, **headers: str) -> list[dict]:
    reply = post(url, "/v1/sql", json.dumps({"query": query, "params": params or []}).encode(),
                 "application/json", **headers)
    assert reply.status == 200, reply.body
    return reply.json()["rows"]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    process = start_daemon(tmp_path / "observe.duckdb")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for a module whose tests write disjoint traces."""
    process = start_daemon(tmp_path_factory.mktemp("shared") / "observe.duckdb")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])
