"""The agent side: send spans to the daemon with the OTel SDK, and attach scores to spans.

Never raises from the telemetry path: a daemon that is down costs the agent dropped spans (the
exporter logs and counts them), never a failure of its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Span

EVALUATION_EVENT = "gen_ai.evaluation.result"


@dataclass(frozen=True)
class BatchSettings:
    """The ``BatchSpanProcessor`` settings ``instrument()`` passes, each overridden by its ``OTEL_BSP_*``
    variable. Measured with ``benchmarks/perf/burst.py`` (docs/performance.md, "Burst from one agent
    process"): at the SDK's defaults a 20,000-span burst from one process loses 13-31% of its spans even
    to a receiver that acks at once, because the SDK's encoder shares the agent's GIL and its queue of
    2,048 fills in about 0.1 s. A span waiting in the queue costs about 2.8 KB (a small GenAI span of the
    burst; the benchmark measures it first, with tracemalloc; a span that carries a prompt costs that much more).
    """

    # Holds a whole 20,000-span burst even if no export is acked while it lasts (a busy machine, a daemon
    # restarting), with room to spare: the deepest queue measured at the end of a burst was 15,392 spans
    # (to the daemon that acks after its commit, at load 5 on two cores). Full, it holds ~88 MiB of such
    # spans; the deque grows only with what is waiting, so an agent whose receiver keeps up pays nothing
    # for the size.
    max_queue_size: int = 32_768
    # The SDK's own. Batches of 1,024 or 2,048 left 15-25% fewer spans queued when the burst ended but
    # stored no more once the queue holds the burst, and they double or quadruple the largest request,
    # which must stay under the daemon's --max-body-mib (64) when spans carry prompts. It also keeps valid
    # every queue size the SDK accepts (a batch may not exceed the queue) when a user sets only the queue's.
    max_export_batch_size: int = 512
    # Changes nothing in a burst (200, 1,000 and 5,000 ms stored the same 20,000: a full batch wakes the
    # exporter at once). It bounds how long a lone span waits before it is sent, and so what a killed agent
    # loses and how late the page shows a run: 1 s instead of the SDK's 5 s, at most one request a second
    # from a process whose spans trickle.
    schedule_delay_millis: int = 1_000
    # Not set: the SDK reads OTEL_BSP_EXPORT_TIMEOUT but does not use it (1.45). An export is bounded by
    # the exporter's own timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s) and the last flush by
    # TracerProvider.shutdown's 30 s, ample for a full queue (20,000 spans flush in 1-3 s).

    def environment(self) -> dict[str, str]:
        """The ``OTEL_BSP_*`` variables that give a plain SDK setup these settings (docs/observe.md)."""
        return {_VARIABLES[f.name]: str(getattr(self, f.name)) for f in fields(self)}

    def arguments(self, environ: Mapping[str, str]) -> dict[str, int | None]:
        """``BatchSpanProcessor`` keyword arguments: None for each setting whose variable ``environ``
        sets, so the SDK reads the user's value, as it reads it only when the argument is None."""
        return {f.name: None if _VARIABLES[f.name] in environ else getattr(self, f.name) for f in fields(self)}


_VARIABLES = {
    "max_queue_size": "OTEL_BSP_MAX_QUEUE_SIZE",
    "max_export_batch_size": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "schedule_delay_millis": "OTEL_BSP_SCHEDULE_DELAY",
}
BATCH_SETTINGS = BatchSettings()


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

    With ``batch`` (the default) spans go through a ``BatchSpanProcessor`` sized by ``BATCH_SETTINGS``
    so that a burst of 20,000 spans is not dropped; an ``OTEL_BSP_*`` variable set in the environment
    wins over lousho's value for its setting.
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
    if batch:
        # The SDK reads OTEL_BSP_* from os.environ itself, in this constructor; look at the same mapping,
        # only to step aside for what the user set.
        processor: SpanProcessor = BatchSpanProcessor(exporter, **BATCH_SETTINGS.arguments(os.environ))
    else:
        processor = SimpleSpanProcessor(exporter)
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
