"""The agent side: send spans to the daemon with the OTel SDK, and attach scores to spans.

Never raises from the telemetry path: a daemon that is down costs the agent dropped spans (the
exporter logs and counts them), never a failure of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Span

EVALUATION_EVENT = "gen_ai.evaluation.result"


def instrument(
    service_name: str,
    endpoint: str = "http://127.0.0.1:4318",
    *,
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf",
    token: str | None = None,
    batch: bool = True,
    resource_attributes: dict[str, str] | None = None,
    ca_cert: str | Path | None = None,
) -> TracerProvider:
    """A TracerProvider that exports to the daemon. It is not made global: pass it on, or call
    ``opentelemetry.trace.set_tracer_provider`` yourself. Call ``shutdown()`` before exit so the
    last batch is sent.

    ``endpoint`` is the daemon's base address: ``http://host:4318`` for OTLP/HTTP, or
    ``http://host:4317`` with ``protocol="grpc"``; ``https://`` for a daemon on TLS, whose certificate
    ``ca_cert`` (a PEM file) is trusted when it is self-signed.
    """
    headers = {"authorization": f"Bearer {token}"} if token else None
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        target = endpoint.split("://", 1)[-1]
        if endpoint.startswith("https://"):
            import grpc

            roots = Path(ca_cert).read_bytes() if ca_cert is not None else None
            exporter = Grpc(endpoint=target, credentials=grpc.ssl_channel_credentials(roots), headers=headers)
        else:
            exporter = Grpc(endpoint=target, insecure=True, headers=headers)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        exporter = Http(endpoint=f"{endpoint.rstrip('/')}/v1/traces", headers=headers,
                        certificate_file=str(ca_cert) if ca_cert is not None else None)
    attrs = {"service.name": service_name, **(resource_attributes or {})}
    provider = TracerProvider(resource=Resource.create(attrs))
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def record_score(
    span: Span,
    name: str,
    value: float,
    label: str | None = None,
    explanation: str | None = None,
    failed_check: str | None = None,
) -> None:
    """Attach a ``gen_ai.evaluation.result`` event to ``span`` (GenAI semantic conventions).

    A pass/fail verdict uses ``label="pass"`` or ``"fail"``; ``failed_check`` names the check a
    failed answer missed (``lousho.check.failed``) and implies a fail.
    """
    attributes: dict[str, str | float] = {
        "gen_ai.evaluation.name": name,
        "gen_ai.evaluation.score.value": float(value),
    }
    if label is not None:
        attributes["gen_ai.evaluation.score.label"] = label
    if explanation is not None:
        attributes["gen_ai.evaluation.explanation"] = explanation
    if failed_check is not None:
        attributes["lousho.check.failed"] = failed_check
    span.add_event(EVALUATION_EVENT, attributes=attributes)
