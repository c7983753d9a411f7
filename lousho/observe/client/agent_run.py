"""The agent-side run span for agents lousho did not build: ``with agent_run(...) as run: ...``.

It opens the run's root ``invoke_agent`` span (GenAI semantic conventions) with the attributes the daemon and
the improve loop read: ``gen_ai.agent.name``, the harness revision (``lousho.harness.revision``, and
``gen_ai.agent.version``, the standard attribute for it), ``lousho.run.id``, ``lousho.case.id`` and the input.
Spans started inside it, e.g. by an off-the-shelf OpenAI instrumentation, become its children. ``run.output``
records the answer and ``run.verdict`` the check's verdict as a ``gen_ai.evaluation.result`` event.

Optional: an agent that sets these attributes itself, or sends plain GenAI traces, needs none of this. Like
the rest of the agent side it never raises from the telemetry path: a harness directory that cannot be hashed
costs the run its revision attribute (logged), never the run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from lousho.kernel.harness_hash import HarnessUnreadable, harness_revision
from lousho.observe.client.export import record_score

logger = logging.getLogger(__name__)

# The evaluation name of a check verdict, as the reference agent records it.
CHECK_SCORE = "check"


@dataclass
class AgentRun:
    """The open run: its root ``span``, ``run_id`` and ``revision`` (None when it could not be computed)."""

    span: Span
    run_id: str
    revision: str | None

    def output(self, text: str) -> None:
        """Record the agent's final answer (``gen_ai.output.messages``)."""
        self.span.set_attribute("gen_ai.output.messages", text)

    def verdict(self, verdict: Any, *, failed_check: str | None = None, explanation: str | None = None) -> None:
        """Record a verdict: a lousho ``Verdict``, an object with ``status`` ("pass"/"fail"/...), or a bool.

        A pass scores 1.0, anything else 0.0 with its label; ``failed_check`` names the check a failed
        answer missed (the loop's editors see these names).
        """
        status = verdict if isinstance(verdict, str) else getattr(verdict, "status", None)
        if isinstance(verdict, bool):
            status = "pass" if verdict else "fail"
        status = str(status or "fail")
        failed = failed_check if failed_check is not None else getattr(verdict, "failed_check", None)
        why = explanation if explanation is not None else getattr(verdict, "explanation", None)
        record_score(self.span, CHECK_SCORE, 1.0 if status == "pass" else 0.0, label=status,
                     explanation=why, failed_check=failed if status != "pass" else None)


@contextmanager
def agent_run(
    agent: str,
    *,
    harness: str | Path | None = None,
    revision: str | None = None,
    input: str | None = None,  # noqa: A002 (the GenAI attribute's name)
    case_id: str | None = None,
    run_id: str | None = None,
    probe: bool = False,
    tracer_provider: Any | None = None,
    session_id: str | None = None,
    traffic_arm: str | None = None,
) -> Iterator[AgentRun]:
    """Open one run of ``agent`` as the current span; end it when the block ends.

    Args:
        agent: the ``gen_ai.agent.name`` the daemon groups runs by (``--agent NAME=...``).
        harness: the harness directory the agent read its instructions and skills from; its revision
            (``lousho.harness_revision``) tags the run. ``revision`` gives it directly instead.
        input: the user's input (``gen_ai.input.messages``); ``case_id`` a stable id of that input.
        run_id: the run's id (default: a new one); ``probe``: a run the improve loop started, which
            the daemon's trigger and the monitor never count as live traffic.
        tracer_provider: any OpenTelemetry TracerProvider (``lousho.observe.instrument`` or your own);
            default: the global one.
        session_id: the session the run belongs to (``gen_ai.conversation.id``), the unit the monitor's
            variance is clustered by; ``traffic_arm``: the arm ``lousho.agent.traffic_route.route`` gave the
            session (``lousho.traffic.arm``) while the loop splits traffic (a canary, the monitor's holdback).

    An exception in the block marks the run as an error (``error.type``, span status) and propagates.
    """
    if revision is None and harness is not None:
        revision = _revision(harness)
    run_id = run_id or f"run-{uuid.uuid4().hex}"
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    tracer = provider.get_tracer("lousho.observe.agent_run")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                                  "lousho.run.id": run_id}
    if revision is not None:
        attributes["lousho.harness.revision"] = revision
        attributes["gen_ai.agent.version"] = revision
    if input is not None:
        attributes["gen_ai.input.messages"] = input
    if case_id is not None:
        attributes["lousho.case.id"] = case_id
    if probe:
        attributes["lousho.probe"] = True
    if session_id is not None:
        attributes["gen_ai.conversation.id"] = session_id
    if traffic_arm is not None:
        attributes["lousho.traffic.arm"] = traffic_arm
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes=attributes,
                                      record_exception=True, set_status_on_exception=False) as span:
        try:
            yield AgentRun(span, run_id, revision)
        except BaseException as e:
            span.set_attribute("error.type", getattr(e, "code", None) or type(e).__name__)
            span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"[:500]))
            raise


def _revision(harness: str | Path) -> str | None:
    # The improve loop's revision of the same directory (lousho.kernel.harness_hash is what both compute it with).
    try:
        return harness_revision(harness)
    except HarnessUnreadable as e:
        logger.warning("lousho agent_run: no harness revision for %s: %s", harness, e.message)
        return None
