"""OTLP/gRPC: ``TraceService/Export`` on its own port, with the HTTP side's semantics.

The same decoder and writer; a full queue is UNAVAILABLE with a RetryInfo the OTel exporters honour,
a malformed request INVALID_ARGUMENT, malformed spans a partial success. The method is registered with no
request deserializer, so the decoder gets the wire bytes (the native one reads them without protobuf objects).
"""

from __future__ import annotations

import socket
from concurrent import futures

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from lousho.observe.config import DaemonConfig
from lousho.observe.decode import otlp_native
from lousho.observe.decode.otlp_decode import BadPayload
from lousho.observe.errors import StoreCorrupt, StoreDiskFull, bind_error
from lousho.observe.metrics import Metrics
from lousho.observe.receive.http_layers import bearer_matches
from lousho.observe.store import faults
from lousho.observe.store.spool import KIND_PROTOBUF
from lousho.observe.store.writer import QueueFull, ShuttingDown, Writer, is_transient

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
# A handler waits at most this long for its request's sync when the client set no shorter deadline: a
# sync slower than that is a stuck disk, and each waiting handler holds one of the server's threads.
ACK_WAIT_S = 30.0


class _TraceService:
    def __init__(self, config: DaemonConfig, writer: Writer, metrics: Metrics) -> None:
        self._config = config
        self._writer = writer
        self._metrics = metrics
        self._expected = config.token.encode() if config.token else None
        self._check = otlp_native.protobuf_checker()

    def export(self, body: bytes, context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        try:
            return self._export(body, context)
        except MemoryError:
            # At the memory cap (memory_cap.py) while a query held memory: not acked (a resend is stored once).
            self._metrics.add(requests_refused_memory=1)
            self._retry_later(context)
            context.abort(grpc.StatusCode.UNAVAILABLE, "LOUSHO_OBSERVE_OUT_OF_MEMORY: the daemon is at its memory cap")
            raise  # abort raises; this line is for the type checker

    def _export(self, body: bytes, context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        if self._expected is not None:
            given = dict(context.invocation_metadata()).get("authorization")
            if not bearer_matches(str(given) if given is not None else None, self._expected):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        nbytes = len(body)
        if not self._writer.has_room(nbytes):
            self._refuse(context)
        try:
            checked = self._check(body)  # counts and errors only: the rows are decoded after the ack
        except BadPayload as e:
            self._metrics.add(requests_bad=1)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        faults.point("receive.checked")
        self._metrics.add(spans_rejected=checked.rejected, values_nulled=checked.nulled)
        try:
            future = self._writer.submit(checked, nbytes, body, KIND_PROTOBUF)
            del body  # the spool and the loader hold it now; the ack needs only the counts
        except (QueueFull, ShuttingDown):
            self._refuse(context)
        try:
            future.result(timeout=_ack_wait(context))
        except TimeoutError:
            # The spool's sync did not return in time: the client's deadline (or ours) is spent, and its thread
            # must not wait for ever. Retryable: a resend that is also stored is stored once (dedup).
            self._retry_later(context)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the spool did not sync in time; retry later")
        except StoreCorrupt as e:
            self._metrics.mark_store_damaged(e)
            context.abort(grpc.StatusCode.INTERNAL, f"{e.code}: {e.message}; {e.hint}")
        except StoreDiskFull as e:
            self._metrics.add(requests_refused_disk_full=1)
            self._retry_later(context)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{e.code}: {e.message}; {e.hint}")
        except MemoryError:
            raise  # the spool's write met the memory cap: answered by ``export``
        except Exception as e:
            code = grpc.StatusCode.UNAVAILABLE if is_transient(e) else grpc.StatusCode.INVALID_ARGUMENT
            context.abort(code, f"commit failed: {e}")
        response = trace_service_pb2.ExportTraceServiceResponse()
        if checked.rejected:
            response.partial_success.rejected_spans = checked.rejected
            response.partial_success.error_message = checked.error_message()
        return response

    def _refuse(self, context: grpc.ServicerContext) -> None:
        self._metrics.add(requests_refused_full=1)
        self._retry_later(context)
        context.abort(grpc.StatusCode.UNAVAILABLE, "the admission queue is full; retry later")

    def _retry_later(self, context: grpc.ServicerContext) -> None:
        """The RetryInfo the OTel exporters honour as the pause before their next try."""
        info = RetryInfo(retry_delay=Duration(seconds=self._config.retry_after_s))
        context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))


def _ack_wait(context: grpc.ServicerContext) -> float:
    """How long a handler waits for its request's sync: the client's deadline, at most ``ACK_WAIT_S``."""
    remaining = context.time_remaining()
    return ACK_WAIT_S if remaining is None else max(0.0, min(remaining, ACK_WAIT_S))


def _check_free(host: str, port: int | None) -> None:
    """Bind the port once ourselves: grpc reports a busy port only after logging its own line to stderr."""
    if not port:
        return
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as e:
        raise bind_error("gRPC", host, port, e) from None
    finally:
        probe.close()


def start_grpc(config: DaemonConfig, writer: Writer, metrics: Metrics) -> tuple[grpc.Server, int]:
    """Start the gRPC listener; returns the server and the port it bound (for port 0)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="lousho-grpc"),
        options=[
            # grpc enforces this on the decompressed message: the OTLP size cap holds here too.
            ("grpc.max_receive_message_length", config.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    service = _TraceService(config, writer, metrics)
    handler = grpc.unary_unary_rpc_method_handler(
        service.export,
        request_deserializer=None,  # the wire bytes, for the decoder
        response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    host = config.host if ":" not in config.host else f"[{config.host}]"
    address = f"{host}:{config.grpc_port}"
    _check_free(config.host, config.grpc_port)
    try:
        if config.tls_cert is not None and config.tls_key is not None:
            credentials = grpc.ssl_server_credentials(
                [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())]
            )
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as e:  # grpc's "Failed to bind to address"
        raise bind_error("gRPC", config.host, config.grpc_port, OSError(str(e))) from None
    if port == 0:
        raise bind_error("gRPC", config.host, config.grpc_port, OSError("no address bound"))
    server.start()
    return server, port
