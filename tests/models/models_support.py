"""Helpers and fixtures of the models tests.

Not a conftest.py: the suite's tests import helpers with ``from daemon_support import ...``, and a second
conftest module would shadow tests/conftest.py for them. Test modules import the fixtures
(``*_fixture``, registered under their ``name``).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lousho.models.client import ChatClient
from lousho.models.scripted import ScriptedModelServer

SCRIPTS = Path(__file__).parent / "scripts"
SUPPORT_DESK = SCRIPTS / "support_desk.py"
RULES = SCRIPTS / "rules.json"


def user(text: str, system: str | None = None) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": text}]


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]



@dataclass
class RawServer:
    """A stdlib HTTP server that answers every POST with a set status, headers and body, and records
    the headers and JSON bodies it got. For answers the scripted server never gives (garbage, echoed keys, dates)."""

    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    seen: list[dict[str, str]] = field(default_factory=list)
    bodies: list[object] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    url: str = ""

    def answer(self, status: int, body: bytes | dict[str, object], **headers: str) -> None:
        self.status = status
        self.body = json.dumps(body).encode() if isinstance(body, dict) else body
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}


@pytest.fixture(scope="module", name="shared_server")
def shared_server_fixture() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SUPPORT_DESK, seed=0) as running:
        yield running


@pytest.fixture(name="server")
def server_fixture(shared_server: ScriptedModelServer) -> ScriptedModelServer:
    """The support-desk script, fresh for each test: no requests, counts or faults left from others."""
    shared_server.reset()
    return shared_server


@pytest.fixture(name="client")
def client_fixture(server: ScriptedModelServer) -> ChatClient:
    # Shorter than the scripted hang (5 s), long enough for a loaded machine.
    return ChatClient(server.url, "scripted-1", api_key="sk-test-0123456789abcdef", timeout=1.0)


@pytest.fixture(name="write_script")
def write_script_fixture(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture(name="raw_server")
def raw_server_fixture() -> Iterator[RawServer]:
    raw = RawServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            raw.bodies.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
            raw.seen.append({k.lower(): v for k, v in self.headers.items()})
            raw.paths.append(self.path)
            self.send_response(raw.status)
            for key, value in raw.headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(raw.body)))
            self.end_headers()
            self.wfile.write(raw.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    raw.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield raw
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
