"""The daemon's HTTP routes: OTLP/HTTP traces, read-only SQL, health and metrics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from lousho.kernel._checked_json import NestedTooDeep, invalid_text, loads_bounded
from lousho.observe.config import DaemonConfig
from lousho.observe.decode import otlp_json_native, otlp_native
from lousho.observe.decode.otlp_decode import BadPayload, Checked, Decoded
from lousho.observe.errors import LakeUnavailable, ObserveError, SqlBusy, SqlTooLarge, StoreCorrupt, StoreDiskFull
from lousho.observe.lake.lake_query import LakeReader
from lousho.observe.metrics import Metrics
from lousho.observe.receive.http_guard import HostGuard
from lousho.observe.receive.http_layers import (
    GRPC_INTERNAL,
    GRPC_UNAVAILABLE,
    BearerToken,
    BodyLimit,
    error_response_parts,
)
from lousho.observe.sql import query as sql_api
from lousho.observe.sql.sql_encode import csv_answer, json_answer
from lousho.observe.sql.sql_pool import SqlPool, Ticket
from lousho.observe.store import faults
from lousho.observe.store.spool import KIND_JSON, KIND_PROTOBUF
from lousho.observe.store.writer import QueueFull, ShuttingDown, Writer, is_transient

PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})
ARROW_STREAM = "application/vnd.apache.arrow.stream"
CSV = "text/csv"
# A query and its parameters need a few levels (a list parameter is 3 deep); deeper is refused before parsing.
SQL_MAX_JSON_DEPTH = 32
# An OTLP body under this size is checked on the event loop (about 0.5 ms at most); a larger one on a thread.
INLINE_CHECK_BYTES = 256 * 1024


@dataclass(frozen=True)
class Mounted:
    """An app served beside the API on the same port (the page): the paths ``owns`` accepts go to ``app``,
    which brings its own token check; every other path goes to the API."""

    app: ASGIApp
    owns: Callable[[str], bool]


# Builds the mounted app once the store exists: it gets the store's factory of read-only connections.
PageFactory = Callable[[Callable[[], duckdb.DuckDBPyConnection]], Mounted]


def build_app(
    config: DaemonConfig,
    writer: Writer,
    metrics: Metrics,
    reader_factory: Any,
    page: Mounted | None = None,
    lake: LakeReader | None = None,
    lake_sync: Callable[[float], float] | None = None,
) -> ASGIApp:
    """The ASGI app: routes, wrapped by the body limit, wrapped by the token check; beside them ``page``
    (the web page, which the CLI builds: observe imports no other part), with its own token layer."""
    check_protobuf = otlp_native.protobuf_checker()
    check_json = otlp_json_native.json_checker()

    async def traces(request: Request) -> Response:
        try:
            return await _traces(request)
        except MemoryError:
            # The process met its memory cap (memory_cap.py) while a query held memory: reading, checking or
            # spooling this request. It is not acked, and a resend is stored once.
            metrics.add(requests_refused_memory=1)
            return _error(request, 503, "LOUSHO_OBSERVE_OUT_OF_MEMORY", "the daemon is at its memory cap",
                          "retry; the daemon's --memory-cap sets the bound", GRPC_UNAVAILABLE,
                          retry_after=config.retry_after_s)

    async def _traces(request: Request) -> Response:
        ctype = request.headers.get("content-type", "")
        base = ctype.split(";", 1)[0].strip().lower()
        if base not in PROTOBUF_TYPES and base != "application/json":
            metrics.add(requests_bad=1)
            return _error(
                request, 415, "LOUSHO_OBSERVE_UNSUPPORTED_MEDIA_TYPE",
                f"Content-Type {ctype or '(none)'!r} is not supported",
                "send application/x-protobuf, application/protobuf or application/json",
            )
        body = await _body_once(request)
        size = len(body)
        if not writer.has_room(size):
            return _unavailable(request, config, metrics)
        checker = check_json if base == "application/json" else check_protobuf
        try:
            # The check (counts and errors, no columns) is all the ack needs; the rows are decoded after it. A
            # small body is checked on the event loop: a hop to a thread would cost more than the check.
            checked = checker(body) if size < INLINE_CHECK_BYTES else await run_in_threadpool(checker, body)
        except BadPayload as e:
            metrics.add(requests_bad=1)
            return _error(request, 400, "LOUSHO_OBSERVE_BAD_PAYLOAD", str(e),
                          "send an OTLP ExportTraceServiceRequest")
        faults.point("receive.checked")
        metrics.add(spans_rejected=checked.rejected, values_nulled=checked.nulled)
        try:
            future = writer.submit(checked, size, body, KIND_JSON if checker is check_json else KIND_PROTOBUF)
            del body  # the spool and the loader hold it now; the ack needs only the counts
        except (QueueFull, ShuttingDown):
            return _unavailable(request, config, metrics)
        try:
            # Shielded: a cancelled request (a client gone, the shutdown's timeout) must not cancel the spool's
            # future; the spool resolves it all the same.
            await asyncio.shield(asyncio.wrap_future(future))
        except StoreCorrupt as e:
            # Not retryable (OTLP retries 429/502/503/504 only): resending cannot help a damaged file.
            metrics.mark_store_damaged(e)
            return _error(request, 500, e.code, e.message, e.hint, GRPC_INTERNAL)
        except StoreDiskFull as e:
            # Retryable: nothing is lost, and the daemon takes spans again once there is room.
            metrics.add(requests_refused_disk_full=1)
            return _error(request, 503, e.code, e.message, e.hint, GRPC_UNAVAILABLE,
                          retry_after=config.retry_after_s)
        except MemoryError:
            raise  # the spool's write met the memory cap: answered by ``traces``
        except Exception as e:
            if is_transient(e):
                return _error(request, 503, "LOUSHO_OBSERVE_COMMIT_FAILED", str(e),
                              "retry; the daemon's log has the cause", GRPC_INTERNAL,
                              retry_after=config.retry_after_s)
            metrics.add(requests_bad=1)
            return _error(request, 400, "LOUSHO_OBSERVE_UNSTORABLE", f"the store refused this batch: {e}",
                          "the daemon's log has the cause; do not resend this batch")
        return _export_response(base, checked)

    sql_pool = SqlPool(config.sql_workers, queue=config.sql_workers)

    async def sql(request: Request) -> Response:
        # A JSON body only: a web page can send text/plain or a form without a CORS preflight.
        ctype = request.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            return _error(request, 415, "LOUSHO_SQL_UNSUPPORTED_MEDIA_TYPE",
                          f"Content-Type {ctype or '(none)'!r} is not supported",
                          "send Content-Type: application/json")
        raw = await request.body()
        # Bounded before anything parses it, the JSON too: the query is most of the body.
        if len(raw) > config.sql_max_query_bytes + _SQL_BODY_SLACK:
            e = SqlTooLarge(f"the request is {len(raw)} bytes, over the {config.sql_max_query_bytes} byte "
                            "bound on a query")
            return _error(request, 413, e.code, e.message, e.hint)
        doc = _sql_request(raw)
        if isinstance(doc, str):
            return _error(request, 400, "LOUSHO_SQL_BAD_REQUEST", doc,
                          "send UTF-8 JSON: {\"query\": ..., \"params\": [...]}")
        accept = request.headers.get("accept", "")
        media_type = ARROW_STREAM if ARROW_STREAM in accept else CSV if CSV in accept else "application/json"
        scope = request.query_params.get("scope", "local")
        if scope not in ("local", "lake"):
            return _error(request, 400, "LOUSHO_SQL_BAD_SCOPE", f"scope {scope!r} is not one of local, lake",
                          "send ?scope=local (this daemon's store, the default) or ?scope=lake (every daemon's)")
        if scope == "lake" and lake is None:
            return _error(request, 400, "LOUSHO_LAKE_NOT_CONFIGURED", "this daemon writes to no lake",
                          "start it with --lake CATALOG --lake-data DIR, or query ?scope=local")

        def run() -> tuple[bytes, bool, int, float]:
            if scope == "lake" and lake is not None:
                # Read your acks on the lake too: this daemon's acked spans are loaded, then committed to the lake,
                # before the query runs (both waits bounded by --read-wait); other daemons' within their --lake-every.
                started = time.monotonic()
                lag = writer.wait_loaded(config.read_wait_s)
                if lake_sync is not None:
                    lag += lake_sync(max(0.0, config.read_wait_s - (time.monotonic() - started)))
                result = lake.run(doc["query"], doc.get("params"), timeout=config.lake_sql_timeout_s,
                                  max_rows=config.sql_max_rows, max_query_bytes=config.sql_max_query_bytes,
                                  max_answer_bytes=config.sql_query_memory)
                encode = _encoder(media_type, config.sql_query_memory)
                return encode(result), result.truncated, result.table.num_rows, lag
            # Read your acks: the query sees every request acked before it arrived, or says how far behind it is.
            lag = writer.wait_loaded(config.read_wait_s)
            con: duckdb.DuckDBPyConnection = reader_factory()
            try:
                result = sql_api.run_query(
                    con, doc["query"], doc.get("params"),
                    timeout=config.sql_timeout_s, max_rows=config.sql_max_rows,
                    max_query_bytes=config.sql_max_query_bytes, max_answer_bytes=config.sql_query_memory,
                )
            finally:
                con.close()
            # Encoded here, on the SQL worker: a million rows must not stall the event loop.
            encode = _encoder(media_type, config.sql_query_memory)
            return encode(result), result.truncated, result.table.num_rows, lag

        try:
            ticket = sql_pool.admit()
        except SqlBusy as e:
            return _error(request, 503, e.code, e.message, e.hint, retry_after=config.retry_after_s)
        try:
            body, truncated, rows, lag = await sql_pool.run(run)
        except ObserveError as e:
            ticket.release()
            if isinstance(e, LakeUnavailable):
                return _error(request, 503, e.code, e.message, e.hint, retry_after=config.retry_after_s)
            return _error(request, 413 if isinstance(e, SqlTooLarge) else 400, e.code, e.message, e.hint)
        except MemoryError as e:
            # The answer's encoding met the daemon's memory cap (memory_cap.py).
            ticket.release()
            refused = sql_api.out_of_memory(str(e) or type(e).__name__, capped=True)
            return _error(request, 400, refused.code, refused.message, refused.hint)
        except BaseException:
            ticket.release()
            raise
        if len(body) > config.sql_query_memory:
            ticket.release()
            return _error(request, 400, "LOUSHO_SQL_OUT_OF_MEMORY",
                          f"the encoded answer passed the {config.sql_query_memory} bytes one query may hold",
                          "narrow the query (WHERE, fewer columns, LIMIT) or ask for Arrow")
        ticket.hold(len(body))
        headers = {"x-lousho-rows": str(rows), "x-lousho-lag-ms": str(round(lag * 1000))}
        if truncated:
            headers["x-lousho-truncated"] = "true"
        return _HeldAnswer(body, ticket, media_type=media_type, headers=headers)

    async def healthz(request: Request) -> Response:
        damage = metrics.store_damage
        if damage is not None:
            return JSONResponse({"status": "unhealthy", "code": damage.code, "message": damage.message,
                                 "hint": damage.hint}, status_code=503)
        stopped = metrics.loader_stopped
        if stopped is not None:
            return JSONResponse({"status": "unhealthy", "code": "LOUSHO_OBSERVE_LOADER_STOPPED", "message": stopped,
                                 "hint": "restart the daemon (the spool replays every accepted request); "
                                         "the daemon's log has the cause"}, status_code=503)
        full = metrics.store_disk_full
        if full is not None:
            # 503: no span can be stored now; "degraded", not "unhealthy": it passes once there is room.
            return JSONResponse({"status": "degraded", "reason": "disk full", "code": full.code,
                                 "message": full.message, "hint": full.hint}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics_route(request: Request) -> Response:
        sql_lines = (f"# TYPE lousho_sql_pending_bytes gauge\nlousho_sql_pending_bytes {sql_pool.pending_bytes}\n"
                     f"# TYPE lousho_sql_in_flight gauge\nlousho_sql_in_flight {sql_pool.in_flight}\n")
        return PlainTextResponse(metrics.render() + sql_lines, media_type="text/plain; version=0.0.4")

    routes = [
        Route("/v1/traces", traces, methods=["POST"]),
        Route("/v1/sql", sql, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
    ]
    app: ASGIApp = Starlette(routes=routes)
    app = BodyLimit(app, config.max_body_bytes, budget=writer, timeout_s=config.body_timeout_s,
                    retry_after_s=config.retry_after_s,
                    on_refused=lambda: metrics.add(requests_refused_full=1))
    app = BearerToken(app, config.token)
    if page is not None:
        app = _beside(app, page)
    return HostGuard(app, bind_host=config.host, allowed_hosts=config.allowed_hosts)


# JSON quoting and the params around the query text.
_SQL_BODY_SLACK = 64 * 1024
# An answer goes out in pieces: the connection's buffer then holds one piece, not a second copy of it all.
_ANSWER_PIECE = 256 * 1024


class _HeldAnswer(Response):
    """An answer whose pool slot and bytes are given back once it is sent, or once the connection is gone
    (the daemon's send timeout aborts a client that reads nothing)."""

    def __init__(self, body: bytes, ticket: Ticket, **kwargs: Any) -> None:
        super().__init__(body, **kwargs)
        self._ticket = ticket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = memoryview(self.body)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            for start in range(0, len(body), _ANSWER_PIECE):
                more = start + _ANSWER_PIECE < len(body)
                await send({"type": "http.response.body", "body": bytes(body[start:start + _ANSWER_PIECE]),
                            "more_body": more})
            if not body:
                await send({"type": "http.response.body", "body": b""})
        finally:
            body.release()
            self.body = b""
            self._ticket.release()


def _beside(api: ASGIApp, page: Mounted) -> ASGIApp:
    """One app: the page's paths go to the page, everything else to ``api`` (with its own token layer)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and page.owns(scope.get("path", "")):
            await page.app(scope, receive, send)
        else:
            await api(scope, receive, send)

    return app


def _export_response(base_type: str, decoded: Decoded | Checked) -> Response:
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        # Partial success: still 200, with the count and a message (OTLP "Partial Success").
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = decoded.error_message()
    if base_type == "application/json":
        return Response(json_format.MessageToJson(response, indent=None),
                        media_type="application/json")
    return Response(response.SerializeToString(), media_type=base_type)


def _error(
    request: Request, status: int, code: str, message: str, hint: str = "",
    grpc_code: int = 3, retry_after: int | None = None,
) -> Response:
    body, ctype = error_response_parts(
        request.url.path, request.headers.get("content-type", ""), code, message, hint, grpc_code
    )
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return Response(body, status_code=status, media_type=ctype, headers=headers)


def _unavailable(request: Request, config: DaemonConfig, metrics: Metrics) -> Response:
    metrics.add(requests_refused_full=1)
    return _error(
        request, 503, "LOUSHO_OBSERVE_BUSY", "the admission queue is full",
        "retry after the Retry-After delay", GRPC_UNAVAILABLE, retry_after=config.retry_after_s,
    )


async def _body_once(request: Request) -> bytes:
    """The body, read without Starlette keeping a copy on the request (``Request.body`` caches it there until the
    response is sent). BodyLimit hands it on in one piece, so no bytes are copied."""
    chunks = [chunk async for chunk in request.stream() if chunk]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _sql_request(body: bytes) -> dict[str, Any] | str:
    """The body of a /v1/sql request, or why it is not one. Nesting is bounded before the parse (json.loads
    would recurse as deep as the body goes) and so is what DuckDB is handed: its conversion of a parameter
    nested past 64 levels fails outside its own errors. Text that is not valid Unicode is refused here, whole:
    DuckDB cannot take it."""
    try:
        doc = loads_bounded(body, SQL_MAX_JSON_DEPTH)
    except NestedTooDeep as e:
        return str(e)
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError
        return f"the body is not JSON: {e}"
    if not isinstance(doc, dict) or not isinstance(doc.get("query"), str):
        return "the body must be JSON: {\"query\": ..., \"params\": [...]}"
    if doc.get("params") is not None and not isinstance(doc["params"], list):
        return f"params must be a JSON array of values, not {json.dumps(doc['params'])[:60]}"
    bad = invalid_text(doc)
    if bad is not None:
        return f"the body holds text that is not valid Unicode (a lone surrogate): {bad}"
    return doc


def _arrow_bytes(result: sql_api.QueryResult) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, result.table.schema) as stream:
        stream.write_table(result.table)
    return sink.getvalue().to_pybytes()


def _encoder(media_type: str, limit: int) -> Callable[[sql_api.QueryResult], bytes]:
    """The answer's encoder; JSON and CSV stop at ``limit`` bytes as they write (``sql_encode``), where Arrow is
    bounded by the rows read."""
    if media_type == ARROW_STREAM:
        return _arrow_bytes
    encode = csv_answer if media_type == CSV else json_answer
    return lambda result: encode(result, limit)
