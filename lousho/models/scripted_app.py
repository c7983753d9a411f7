"""The scripted model server's HTTP side: OpenAI-shaped answers, the request log, injected faults.

Routes:

- ``POST /v1/chat/completions`` (also ``/chat/completions``): answer with the script (chat_api.py).
- ``POST /v1/responses`` (also ``/responses``): the Responses API, read as the same chat view (responses_api.py).
  Both stream server-sent events when asked (``stream: true``; streaming.py).
- Anything else: a 400 coded ``LOUSHO_MODELS_UNKNOWN_ENDPOINT`` naming the endpoints served.
- ``GET /_lousho/requests``: every request so far, with the reply given (loopback only).
- ``POST /_lousho/faults``: ``{"faults": [{"fault": "status", "status": 503, "times": 2}, ...]}`` queues
  faults for the next requests, before the script is asked; ``DELETE`` empties the queue (loopback only).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lousho.models.chat_api import check_chat, completion, message_of, usage_of
from lousho.models.errors import ModelsError, RequestRefused, ScriptRaised, UnknownEndpoint
from lousho.models.faults import Fault
from lousho.models.responses_api import ResponseMemory, chat_view, response_object
from lousho.models.script import Answer, Script, build_request, normalise, request_key, system_text
from lousho.models.streaming import chat_events, response_events

logger = logging.getLogger("lousho.models.scripted")


class ScriptedService:
    """The server's state: script, seed, request log, per-request counts, fault queue. Thread-safe."""

    def __init__(self, script: Script, seed: int = 0, log_path: Path | None = None) -> None:
        self.script = script
        self.seed = seed
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._counts: collections.Counter[str] = collections.Counter()
        self._faults: collections.deque[Fault] = collections.deque()
        self._memory = ResponseMemory()
        # Bumped by reset(): answers to requests from before it are not logged in memory, hangs end.
        self._generation = 0
        # Opened at the first request, so a server built but never started holds no file open.
        self._log_path = log_path
        self._log_file: IO[str] | None = None
        self._closed = False

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Answer the next ``times`` chat requests with ``fault`` (after any faults already queued)."""
        with self._lock:
            self._faults.extend([fault] * times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Forget the requests, the counts and the queued faults (not the log file), and end hangs."""
        with self._lock:
            self._generation += 1
            self._log.clear()
            self._counts.clear()
            self._faults.clear()
        self._memory.clear()

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._log)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    async def chat(self, request: Request) -> Response:
        return await self._serve(request, "chat")

    async def responses(self, request: Request) -> Response:
        return await self._serve(request, "responses")

    async def unknown(self, request: Request) -> Response:
        """Any other path or method: a coded 400 naming what is served, not a bare 404 a framework misreads."""
        refused = UnknownEndpoint(f"{request.method} {request.url.path} is not an endpoint of the scripted "
                                  f"model server")
        self._record({"path": request.url.path, "status": 400, "reply": refused.body()}, self._generation)
        return JSONResponse(refused.body(), 400)

    async def _serve(self, request: Request, api: str) -> Response:
        """One model call in either API, streamed or not: read it as the chat view, ask the script, answer."""
        try:
            body = json.loads(await request.body())
            if api == "chat":
                view, conversation = check_chat(body), []
            else:
                if not isinstance(body, dict):
                    raise ValueError("expected a JSON object")
                view, conversation = chat_view(body, self._memory.history(body), self._memory.item)
        except ValueError as e:
            error = _error_body(f"invalid request: {e}", "invalid_request_error", "invalid_request")
            self._record({"path": request.url.path, "status": 400, "reply": error}, self._generation)
            return JSONResponse(error, 400)
        except RequestRefused as e:
            self._record({"path": request.url.path, "status": 400, "reply": e.body()}, self._generation)
            return JSONResponse(e.body(), 400)
        with self._lock:
            generation = self._generation
            key = request_key(view)
            self._counts[key] += 1
            count = self._counts[key]
            injected = self._faults.popleft() if self._faults else None
        entry: dict[str, Any] = {
            "path": request.url.path, "model": view.get("model"), "messages": view["messages"],
            "tools": view.get("tools") or [], "system": system_text(view["messages"]), "count": count,
            "injected": injected is not None,
            "params": {k: v for k, v in view.items() if k not in ("model", "messages", "tools")},
        }
        try:
            outcome = await self._outcome(view, count, injected, generation, entry)
        except ModelsError as e:
            error = _error_body(str(e), "server_error", e.code)
            return self._answer(generation, entry, 500, error, JSONResponse(error, 500))
        if isinstance(outcome, Fault):
            return self._answer(generation, entry, outcome.http_status, outcome.body(),
                                JSONResponse(outcome.body(), outcome.http_status, outcome.headers))
        message = message_of(outcome)
        if api == "chat":
            doc = completion(outcome, view, count)
            options = view.get("stream_options") or {}
            events = chat_events(doc, bool(isinstance(options, dict) and options.get("include_usage")))
        else:
            doc = response_object(outcome, body, f"resp_{key[:24]}_{count}", int(time.time()),
                                  usage_of(outcome, view))
            if body.get("store", True) is not False:
                self._memory.keep(doc, [*conversation, message])
            events = response_events(doc)
        response = (StreamingResponse(_replay(events), media_type="text/event-stream",
                                      headers={"cache-control": "no-cache"})
                    if view.get("stream") else JSONResponse(doc))
        return self._answer(generation, entry, 200, message, response)

    async def _outcome(self, body: dict[str, Any], count: int, injected: Fault | None, generation: int,
                       entry: dict[str, Any]) -> Answer | Fault:
        """The answer, or a status fault to answer with; a hang is waited out here."""
        outcome = injected if injected is not None else await run_in_threadpool(self._ask, body, count)
        if not isinstance(outcome, Fault):
            return outcome
        entry["fault"] = outcome.to_dict()
        if outcome.kind == "status":
            return outcome
        await self._sleep(outcome.seconds, generation)
        if injected is not None and outcome.then is None:
            return await run_in_threadpool(self._ask, body, count)
        try:
            after = normalise("" if outcome.then is None else outcome.then, build_request(body, self.seed, count))
        except (TypeError, ValueError, KeyError) as e:
            raise ScriptRaised(self.script.source, f"bad reply after a hang: {e}") from e
        if isinstance(after, Fault):
            raise ScriptRaised(self.script.source, "the reply after a hang must not be another fault")
        return after

    def _ask(self, body: dict[str, Any], count: int) -> Answer | Fault:
        """Run the script (in a worker thread: scripts may block). Script failures become ScriptRaised."""
        request = build_request(body, self.seed, count)
        try:
            reply = self.script.respond(request)
        except ModelsError:
            raise
        except Exception as e:  # the script's bug: answer a 500, log the traceback, keep serving
            logger.exception("script %s raised", self.script.source)
            raise ScriptRaised(self.script.source, f"respond() raised {type(e).__name__}: {e}") from e
        try:
            return normalise(reply, request)
        except (TypeError, ValueError, KeyError) as e:
            raise ScriptRaised(self.script.source, f"respond() returned a bad reply: {e}") from e

    async def _sleep(self, seconds: float, generation: int) -> None:
        # In small steps, so that stopping or resetting the server does not wait out a long hang.
        deadline = time.monotonic() + seconds
        while (not self.stopping.is_set() and generation == self._generation
               and (left := deadline - time.monotonic()) > 0):
            await asyncio.sleep(min(left, 0.05))

    def _answer(self, generation: int, entry: dict[str, Any], status: int, reply: dict[str, Any],
                response: Response) -> Response:
        entry["status"] = status
        entry["reply"] = reply
        self._record(entry, generation)
        return response

    def _record(self, entry: dict[str, Any], generation: int) -> None:
        # Recorded before the answer is sent: a client that got its answer finds its request logged.
        with self._lock:
            if generation == self._generation:
                entry["n"] = len(self._log) + 1
                self._log.append(entry)
            if self._log_file is None and self._log_path is not None and not self._closed:
                self._log_file = self._log_path.open("a", encoding="utf-8")
            if self._log_file is not None:
                self._log_file.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
                self._log_file.flush()

    async def log(self, request: Request) -> Response:
        return JSONResponse(self.requests())

    async def faults(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.clear_faults()
            return JSONResponse({"queued": 0})
        try:
            doc = json.loads(await request.body())
            items = doc["faults"] if isinstance(doc, dict) and "faults" in doc else [doc]
            parsed = [(Fault.from_dict(item), int(item.get("times", 1))) for item in items]
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return JSONResponse(_error_body(f"bad fault list: {e}", "invalid_request_error", None), 400)
        for fault, times in parsed:
            self.inject(fault, times)
        with self._lock:
            return JSONResponse({"queued": len(self._faults)})


def build_app(service: ScriptedService) -> Starlette:
    return Starlette(routes=[
        Route("/v1/chat/completions", service.chat, methods=["POST"]),
        Route("/chat/completions", service.chat, methods=["POST"]),
        Route("/v1/responses", service.responses, methods=["POST"]),
        Route("/responses", service.responses, methods=["POST"]),
        Route("/_lousho/requests", _loopback_only(service.log), methods=["GET"]),
        Route("/_lousho/faults", _loopback_only(service.faults), methods=["POST", "DELETE"]),
        # Last: any other path, or a served path with another method (it out-ranks Starlette's 405).
        Route("/{path:path}", service.unknown, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
    ])


async def _replay(events: Iterator[str]) -> AsyncIterator[str]:
    # The answer is whole already: an async generator sends it without a thread hop per event.
    for event in events:
        yield event


def _error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _loopback_only(endpoint: Any) -> Any:
    """The log holds every prompt and the fault queue steers answers: only this machine may use them."""

    async def guarded(request: Request) -> Response:
        host = request.client.host if request.client else ""
        if not _is_loopback(host):
            return JSONResponse(_error_body("only from loopback", "forbidden", None), 403)
        return await endpoint(request)

    return guarded


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
