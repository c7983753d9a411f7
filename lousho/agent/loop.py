"""The reference agent: a tool-calling loop whose model and tool calls are durable steps.

A run re-executes from the top on resume; ``DurableRun.step`` returns the recorded result of every
step that completed, so a model turn is never generated twice and a finished tool never runs twice.
Hooks and approvals are decided again on each execution, from the same transcript, so they agree.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

from lousho.agent import spans
from lousho.agent.directory import AgentDir
from lousho.agent.errors import UnknownTool
from lousho.agent.hooks import Deny, Hook, Replace, Stop, ToolCallInfo, run_post, run_pre
from lousho.agent.tools import ToolContext, result_text
from lousho.agent.verdict import Check
from lousho.kernel.errors import LoushoError
from lousho.models.protocol import ModelClient
from lousho.models.result import ChatResult, ToolCall
from lousho.recover import durable, lease
from lousho.recover.durable import DurableRun
from lousho.recover.store import RunStore


@dataclass(frozen=True)
class RunResult:
    run_id: str
    output: str | None
    finish_reason: str  # stop, max-steps, awaiting-approval, stopped, error
    steps: int
    approval_id: str | None = None
    error: dict[str, Any] | None = None
    # The transcript after the system prompt, for whoever judges or studies the run (the improve probe).
    messages: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class RunOptions:
    """How one run is labelled and judged; stored with the run so a resume uses the same."""

    case_id: str | None = None
    probe: bool = False
    traffic_arm: str | None = None
    # The session the run belongs to (gen_ai.conversation.id): the unit the traffic split randomises, so the
    # monitor clusters its variance by it. None: the run is a session of its own.
    session_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "probe": self.probe, "traffic_arm": self.traffic_arm,
                "session_id": self.session_id}


@dataclass
class Agent:
    """One agent directory, one model, one checkpoint store; any number of runs.

    ``hooks`` run around every tool call (see lousho.agent.hooks); ``check``, when given, judges each
    finished run's output and the verdict goes on the run's root span as a gen_ai.evaluation.result.
    """

    directory: AgentDir
    model: ModelClient
    store: RunStore
    model_name: str = "model"
    tracer_provider: Any | None = None
    hooks: Sequence[Hook] = ()
    check: Check | None = None
    provider_name: str = "openai"
    lease_seconds: float = lease.LEASE_SECONDS
    _tracer: Tracer = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._tracer = spans.tracer_of(self.tracer_provider)

    def send(self, text: str, *, run_id: str | None = None, options: RunOptions = RunOptions(),
             setup: dict[str, Any] | None = None) -> RunResult:
        """One input, one run (kind ``send``). ``setup`` (model URL and name, check module; never a key) is
        stored with the run so that ``lousho runs resume`` can rebuild the agent."""
        run_id = run_id or f"run-{uuid.uuid4().hex[:16]}"
        payload = {"messages": [{"role": "user", "content": text}], "text": text,
                   "agent_dir": str(self.directory.path), "options": options.to_dict(), "setup": setup or {}}
        run = durable.start(self.store, run_id, self.directory.name, "send", payload)
        return self._held(run)

    def resume(self, run_id: str, epoch: int | None = None) -> RunResult:
        """Finish an interrupted run from its last checkpoint (completed steps are not repeated).

        ``epoch``: the lease epoch the caller (the recover loop) holds; without it the resume takes the
        run over, fencing out any older runner.
        """
        run = durable.resume(self.store, run_id, epoch=epoch)
        # Under a loop's lease the loop renews it; otherwise this process holds one of its own.
        return self._execute(run) if epoch is not None else self._held(run)

    def run_turn(self, run: DurableRun) -> RunResult:
        """Execute a durable run opened by a session (kind ``turn``)."""
        return self._held(run)

    def _held(self, run: DurableRun) -> RunResult:
        """Execute holding a lease with a heartbeat: if this process dies, recover() may claim the run once
        the lease lapses (``lease_seconds``, 60 by default), never while this process is alive and renewing it."""
        with lease.hold(self.store, run, owner=lease.default_owner("agent"), seconds=self.lease_seconds):
            return self._execute(run)

    # --- one execution of a run ---

    def _execute(self, run: DurableRun) -> RunResult:
        payload = run.input
        options = payload.get("options", {})
        text = payload.get("text", "")
        attrs = spans.root_attributes(
            agent=self.directory.name, run_id=run.run_id, kind=run.kind, revision=self.directory.revision,
            case_id=options.get("case_id"), probe=bool(options.get("probe")), healed_from=run.healed_from,
            traffic_arm=options.get("traffic_arm"), attempt=run.attempts, input_text=text,
            provider_name=self.provider_name, session_id=options.get("session_id"),
        )
        with self._tracer.start_as_current_span(
            f"invoke_agent {self.directory.name}", kind=SpanKind.INTERNAL, attributes=attrs,
            record_exception=True, set_status_on_exception=True,
        ) as root, run:
            try:
                result = self._loop(run, root, payload["messages"])
            except BaseException as e:
                spans.mark_error(root, e)
                raise
            if result.output is not None:
                root.set_attribute("gen_ai.output.messages", result.output)
            root.set_attribute("lousho.run.finish_reason", result.finish_reason)
            if self.check is not None and result.finish_reason in ("stop", "max-steps"):
                spans.record_verdict(root, self.check(text, result.output))
            return result

    def _loop(self, run: DurableRun, root: Any, input_messages: list[dict[str, Any]]) -> RunResult:
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.directory.system_prompt()},
                                          *input_messages]
        tools = self.directory.tools.schemas()
        last_text: str | None = None
        note = run.note  # a .heal fork's diagnosis: the error quoted as data, shown before the first new call
        for step in range(self.directory.max_steps):
            if note and run.next_step not in run.recorded:
                messages.append({"role": "user", "content": note})
                note = None
            chat = ChatResult.from_dict(run.step("chat", lambda: self._chat(run.run_id, messages, tools)))
            messages.append(chat.as_message())
            last_text = chat.content
            if not chat.tool_calls:
                run.finish({"text": chat.content, "finish_reason": "stop", "messages": messages[1:]})
                return RunResult(run.run_id, chat.content, "stop", step + 1, messages=tuple(messages[1:]))
            for call in chat.tool_calls:
                outcome = self._tool_call(run, root, call, messages)
                if isinstance(outcome, RunResult):
                    return outcome
                messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome})
        run.finish({"text": last_text, "finish_reason": "max-steps", "messages": messages[1:]})
        return RunResult(run.run_id, last_text, "max-steps", self.directory.max_steps, messages=tuple(messages[1:]))

    def _chat(self, run_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        with self._tracer.start_as_current_span(
            f"chat {self.model_name}", kind=SpanKind.CLIENT,
            attributes=spans.chat_attributes(self.model_name, self.provider_name, run_id),
        ) as span:
            try:
                result = self.model.complete(messages, tools or None)
            except BaseException as e:
                spans.mark_error(span, e)
                raise
            spans.record_chat(span, result)
            return result.to_dict()

    def _tool_call(self, run: DurableRun, root: Any, call: ToolCall, messages: list[dict[str, Any]]) -> str | RunResult:
        """The text the model sees for this call, or a RunResult when the run must end here.

        Each call gets one ``execute_tool`` span, carrying what the hooks did (``heal.action`` events,
        ``lousho.tool.replaced_by_hook``, a denial as the span's error). A call that a resumed run
        replays from its checkpoints already has its span in an earlier attempt, so it gets none.
        """
        tool = self.directory.tools.get(call.name)
        if tool is None:
            known = sorted(self.directory.tools.tools)
            return f"error: unknown tool {call.name!r}; the tools are {known}"
        if not call.arguments_valid:
            return f"error: the arguments of {call.name} are not valid JSON: {call.raw_arguments[:200]}"
        replaying = any(index >= run.next_step for index in run.recorded)
        with self._tool_span(run.run_id, call, replaying) as span:
            return self._decide_and_call(run, span, tool, call, messages)

    def _decide_and_call(self, run: DurableRun, span: Any, tool: Any, call: ToolCall,
                         messages: list[dict[str, Any]]) -> str | RunResult:
        info = ToolCallInfo(run.run_id, call.id, call.name, dict(call.arguments), tuple(messages))
        pre = run_pre(self.hooks, info)
        for hook_name, message in pre.hints:
            spans.heal_action(span, "hint", hook_name, call.name, message)
        decision = pre.decision
        if isinstance(decision, Stop):
            spans.heal_action(span, "stop", pre.decided_by or "", call.name, decision.reason, decision.count)
            spans.mark_denied(span, decision.code, decision.reason)
            error = {"message": decision.reason, "code": decision.code, "category": None, "retryable": False}
            run.stop(_StopError(decision.reason, decision.code))
            return RunResult(run.run_id, None, "stopped", len(messages), error=error)
        if isinstance(decision, Deny):
            spans.heal_action(span, "deny", pre.decided_by or "", call.name, decision.reason, decision.count)
            spans.mark_denied(span, "denied", decision.reason)
            return f"denied by {pre.decided_by}: {decision.reason}"
        if isinstance(decision, Replace):
            value: Any = decision.result
            span.set_attribute("lousho.tool.replaced_by_hook", pre.decided_by or "")
            if decision.action:
                spans.heal_action(span, decision.action, pre.decided_by or "", call.name, decision.reason)
        else:
            if self.directory.needs_approval(tool):
                waiting = self._approval(run, call, pre.arguments)
                if waiting is not None:
                    return waiting
            arguments = pre.arguments
            value = run.step(f"tool:{call.name}", lambda: self._run_tool(run, span, call, arguments))
        post = run_post(self.hooks, ToolCallInfo(run.run_id, call.id, call.name, pre.arguments, tuple(messages)),
                        value)
        if post.replaced_by is not None:
            span.set_attribute("lousho.tool.replaced_by_hook", post.replaced_by)
            for kind, reason in post.actions:
                spans.heal_action(span, kind, post.replaced_by, call.name, reason)
        text = result_text(post.result)
        for _hook, message in pre.hints:
            text += f"\n\n[note] {message}"
        return text

    @contextmanager
    def _tool_span(self, run_id: str, call: ToolCall, replaying: bool) -> Iterator[Any]:
        if replaying:
            yield trace.INVALID_SPAN  # records nothing
            return
        with self._tracer.start_as_current_span(
            f"execute_tool {call.name}", attributes=spans.tool_attributes(call.name, call.id, run_id),
        ) as span:
            yield span

    def _run_tool(self, run: DurableRun, span: Any, call: ToolCall, arguments: dict[str, Any]) -> Any:
        tool = self.directory.tools.get(call.name)
        if tool is None:
            raise UnknownTool(f"unknown tool {call.name!r} in run {run.run_id}")
        ctx = ToolContext(call_id=call.id, run_id=run.run_id, agent_dir=self.directory.path)
        try:
            value = tool.call(arguments, ctx)
        except Exception as e:  # a tool's failure is a result the model can read, not a crash
            spans.mark_error(span, e)
            return f"error: {type(e).__name__}: {e}"
        return _recordable(value)

    def _approval(self, run: DurableRun, call: ToolCall, arguments: dict[str, Any]) -> str | RunResult | None:
        """None to go ahead, a text result when a person denied it, a RunResult when the run must wait.

        The approval is keyed by the step the tool would record as well as the call id: ids are the provider's,
        and several providers number them per response ("call_1" in every turn; a call without one is
        ``call_<i>``), so by the id alone a later call would find an earlier call's decision and run unseen.
        The step index is the same on every replay of this call and differs for every call that ran."""
        approval_id = f"{run.run_id}:{run.next_step}:{call.id}"
        approval = self.store.get_approval(approval_id)
        if approval is None:
            run.await_approval(tool_call_id=call.id, tool_name=call.name, args=arguments, approval_id=approval_id)
            return RunResult(run.run_id, None, "awaiting-approval", len(run.recorded), approval_id=approval_id)
        if approval.status == "approved":
            return None
        if approval.status == "denied":
            return f"denied by a person: {call.name} was not approved"
        return RunResult(run.run_id, None, "awaiting-approval", len(run.recorded), approval_id=approval_id)


class _StopError(LoushoError):
    """What a hook's Stop is stored as: its code, never retryable (recover() leaves the run alone)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, code=code, retryable=False,
                         hint="the run was stopped by a hook; fix the tool or the instructions, then start a new run")


def _recordable(value: Any) -> Any:
    """A tool's result as its step records it: the value when the store can hold it as JSON (checked all the way
    down, as the store encodes it), else its text, which the model is shown anyway. Checking only the top level let
    a datetime inside a dict, or a NaN, fail the whole run for good after the tool's side effect ran."""
    try:
        json.dumps(value, sort_keys=True, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        pass
    if isinstance(value, list | dict):  # the JSON the model would see, its odd leaves as their text
        try:
            return json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError):
            pass
    return str(value)
