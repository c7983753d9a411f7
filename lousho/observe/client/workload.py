"""A synthetic agent workload through the real OTel SDK: runs with GenAI spans, scores, failures.

Used by the demo, the tests and the benchmarks, so that each sends what a real tool-calling agent
sends: an ``invoke_agent`` root carrying the run attributes, ``chat`` spans with token usage,
``execute_tool`` spans, a pass/fail ``gen_ai.evaluation.result`` event, and errors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from lousho.observe.client.export import record_score

TOOLS = ("read_file", "run_tests", "edit_file", "search")


@dataclass(frozen=True)
class WorkloadPlan:
    runs: int = 300
    agents: tuple[str, ...] = ("coder", "triage")
    revisions: tuple[str, ...] = ("rev-a1", "rev-b2")
    seed: int = 7
    fail_rate: float = 0.2
    error_rate: float = 0.05
    cases: int = 20


@dataclass
class WorkloadSummary:
    runs: int = 0
    spans: int = 0
    failed: int = 0
    errored: int = 0
    run_ids: list[str] = field(default_factory=list)


def emit_runs(provider: TracerProvider, plan: WorkloadPlan) -> WorkloadSummary:
    """Emit ``plan.runs`` runs; the caller flushes or shuts the provider down."""
    rng = random.Random(plan.seed)
    tracer = provider.get_tracer("lousho.workload")
    summary = WorkloadSummary()
    for i in range(plan.runs):
        agent = plan.agents[i % len(plan.agents)]
        revision = plan.revisions[(i * len(plan.revisions)) // max(plan.runs, 1)]
        case = f"case-{rng.randrange(plan.cases):03d}"
        run_id = f"run-{plan.seed}-{i:06d}"
        errored = rng.random() < plan.error_rate
        failed = not errored and rng.random() < plan.fail_rate
        with tracer.start_as_current_span(
            f"invoke_agent {agent}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.provider.name": "openai",
                "gen_ai.conversation.id": f"conv-{i // 3}",
                "lousho.run.id": run_id,
                "lousho.run.kind": "send",
                "lousho.harness.revision": revision,
                "lousho.case.id": case,
                "gen_ai.input.messages": f'[{{"role":"user","content":"fix {case}"}}]',
            },
        ) as root:
            summary.spans += 1
            steps = rng.randint(1, 4)
            for step in range(steps):
                with tracer.start_as_current_span(
                    "chat gpt-test",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "openai",
                        "gen_ai.request.model": "gpt-test",
                        "gen_ai.response.model": "gpt-test-2026",
                        "gen_ai.usage.input_tokens": rng.randint(200, 2000),
                        "gen_ai.usage.output_tokens": rng.randint(20, 400),
                        "gen_ai.response.finish_reasons": ("tool_calls",),
                    },
                ):
                    summary.spans += 1
                tool = TOOLS[(i + step) % len(TOOLS)]
                with tracer.start_as_current_span(
                    f"execute_tool {tool}",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.id": f"call-{i}-{step}",
                    },
                ):
                    summary.spans += 1
            if errored:
                root.set_attribute("error.type", "timeout")
                root.set_status(Status(StatusCode.ERROR, "model call timed out"))
                summary.errored += 1
            else:
                root.set_attribute("gen_ai.output.messages", f'[{{"role":"assistant","content":"done {case}"}}]')
                if failed:
                    record_score(root, "tests", 0.0, label="fail",
                                 explanation="hidden test failed", failed_check="test_rounding")
                    summary.failed += 1
                else:
                    record_score(root, "tests", 1.0, label="pass")
        summary.runs += 1
        summary.run_ids.append(run_id)
    return summary
