"""The scripted model server: an OpenAI-compatible endpoint whose answers come from a script.

Tests and the heal benchmark run the agent against it over real HTTP, so the agent, the client and
the error taxonomy are exercised exactly as with a real provider. Example script::

    from lousho.models.scripted import Fault

    def respond(request):
        if "refund" in (request.last_user or "") and request.turn == 0:
            return {"tool_calls": [{"name": "lookup_order", "arguments": {"id": "A-1"}}]}
        if request.last_tool is not None:
            return f"Your order is {request.last_tool.content}."
        if request.count == 1 and request.rng.random() < 0.2:
            return Fault.status(503)  # a flaky provider, the same way for the same request
        return "How can I help?"
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from lousho.kernel._listen import listen_tcp
from lousho.models.errors import ServerStartFailed
from lousho.models.faults import Fault
from lousho.models.script import ScriptRequest, ToolResult, load_script
from lousho.models.scripted_app import ScriptedService, build_app

__all__ = ["Fault", "ScriptRequest", "ScriptedModelServer", "ToolResult"]


class ScriptedModelServer:
    """The server in this process: uvicorn in a thread, real HTTP on ``host:port`` (0 = a free port).

    The script is loaded in the constructor, so a bad script raises its ``LOUSHO_MODELS_*`` error
    before anything listens. ``url`` is the base URL a :class:`~lousho.models.client.ChatClient` takes.
    """

    def __init__(
        self,
        script: str | Path | Callable[[ScriptRequest], Any],
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log_path: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._service = ScriptedService(load_script(script), seed, log_path)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise ServerStartFailed("the scripted model server is not started; call start() first")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, oldest first: ``n``, ``path``, ``model``, ``messages``, ``tools``, ``system``,
        ``params``, ``count``, ``injected``, ``fault`` (when one was given), ``status`` and ``reply``."""
        return self._service.requests()

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Answer the next ``times`` chat requests with ``fault``, without asking the script.

        An injected hang answers with the script's reply once it is over.
        """
        self._service.inject(fault, times)

    def clear_faults(self) -> None:
        self._service.clear_faults()

    def reset(self) -> None:
        """Start afresh without a restart: forget requests, counts and queued faults; end hangs in progress.

        A test suite can share one server and reset it per test (a restart costs about 0.2 s).
        """
        self._service.reset()

    def start(self, timeout: float = 30.0) -> ScriptedModelServer:
        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self._service), log_level="warning", log_config=None, lifespan="off", access_log=False,
            # A hang checks for stop every 50 ms; this only bounds a script stuck in its own code.
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"lousho-scripted-model:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                sock.close()
                raise ServerStartFailed(f"the scripted model server did not start on {self.host}:{self.port}")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop listening, end hangs early, finish requests in flight, close the log file."""
        self._service.stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._service.close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.url if self._server is not None else "not started"
        return f"ScriptedModelServer({self._service.script.source!r}, {state})"


def _bind(host: str, port: int) -> socket.socket:
    try:
        return listen_tcp(host, port, backlog=128)
    except OSError as e:
        raise ServerStartFailed(f"cannot listen on {host}:{port}: {e}") from None
