"""The reference agent's spans, per the GenAI semantic conventions, with lousho's run attributes.

Telemetry never breaks the agent: with no tracer provider the agent uses OTel's no-op tracer.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from lousho.agent.verdict import Verdict
from lousho.models.result import ChatResult
from lousho.observe.client.export import record_score


def tracer_of(provider: Any | None) -> Tracer:
    if provider is None:
        return trace.get_tracer("lousho.agent", tracer_provider=trace.NoOpTracerProvider())
    return provider.get_tracer("lousho.agent")


def root_attributes(
    *, agent: str, run_id: str, kind: str, revision: str, case_id: str | None, probe: bool,
    healed_from: str | None, traffic_arm: str | None, attempt: int, input_text: str, provider_name: str,
    session_id: str | None = None,
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.provider.name": provider_name,
        "lousho.run.id": run_id,
        "lousho.run.kind": kind,
        "lousho.run.attempt": attempt,
        "lousho.harness.revision": revision,
        "gen_ai.input.messages": input_text,
    }
    optional = {"lousho.case.id": case_id, "lousho.run.healed_from": healed_from,
                "lousho.traffic.arm": traffic_arm, "gen_ai.conversation.id": session_id}
    attrs.update({k: v for k, v in optional.items() if v is not None})
    if probe:
        attrs["lousho.probe"] = True
    return attrs


def chat_attributes(model: str, provider_name: str, run_id: str) -> dict[str, Any]:
    # The run id on every span, not only the root: a killed attempt never ends (or exports) its root,
    # and its finished steps must still be found under the run.
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.provider.name": provider_name,
            "lousho.run.id": run_id}


def record_chat(span: Span, result: ChatResult) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
    if result.model:
        span.set_attribute("gen_ai.response.model", result.model)
    if result.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", (result.finish_reason,))


def tool_attributes(name: str, call_id: str, run_id: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
            "lousho.run.id": run_id}


def heal_action(span: Span, kind: str, hook: str, tool: str, reason: str, count: int | None = None) -> None:
    attrs: dict[str, Any] = {"heal.kind": kind, "heal.hook": hook, "heal.tool": tool, "heal.reason": reason}
    if count is not None:
        attrs["heal.count"] = count
    span.add_event("heal.action", attributes=attrs)


def mark_denied(span: Span, error_type: str, reason: str) -> None:
    """A denial is the tool span's error: the call was refused, not run."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, reason[:500]))


def record_verdict(span: Span, verdict: Verdict) -> None:
    value = {"pass": 1.0, "fail": 0.0}.get(verdict.status, float("nan"))
    record_score(span, "check", value if value == value else 0.0, label=verdict.status,
                 explanation=verdict.explanation, failed_check=verdict.failed_check)


def mark_error(span: Span, error: BaseException) -> None:
    code = getattr(error, "category", None) or getattr(error, "code", None) or type(error).__name__
    span.set_attribute("error.type", str(code))
    span.set_status(Status(StatusCode.ERROR, str(error)[:500]))


__all__ = ["SpanKind", "heal_action", "mark_error", "record_chat", "record_verdict", "root_attributes",
           "tool_attributes", "tracer_of"]
