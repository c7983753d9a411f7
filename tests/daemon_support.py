"""A plain HTTP client for talking to the daemon in tests: post, get, SQL and a /metrics counter."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from dataclasses import dataclass


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


def metric(url: str, name: str) -> float:
    """The value of the unlabelled metric ``name`` on the daemon's /metrics."""
    for line in get(url, "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")
