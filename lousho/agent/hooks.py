"""Hooks around each tool call: trusted control-plane code that can deny, replace or rewrite a call.

Per tool call the loop runs every ``pre_tool_call`` in order: the first ``Deny``, ``Replace`` or
``Stop`` ends the sequence, ``Rewrite``s chain, a ``Hint`` lets the call run and adds a note to its
result. Then the tool runs (unless replaced or denied), then every ``post_tool_call``, each of which
may replace the result the model sees. Hooks must be deterministic functions of the call and the
transcript: a resumed run re-runs them to reach the same decisions. A hook that raises fails the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCallInfo:
    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    messages: Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Deny:
    reason: str
    count: int | None = None  # the hook's running count of denials, for the heal.action event


@dataclass(frozen=True)
class Replace:
    """Stand in for the tool's result. With ``action`` (e.g. "hint"), the replacement is a heal
    action and is recorded as a ``heal.action`` event of that kind with ``reason``."""

    result: Any
    action: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Rewrite:
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Hint:
    message: str


@dataclass(frozen=True)
class Stop:
    """End the run now, not retryable: e.g. the progress guard's last word."""

    reason: str
    code: str = "LOUSHO_RUN_STOPPED_BY_HOOK"
    count: int | None = None


PreDecision = Deny | Replace | Rewrite | Hint | Stop | None
PreHook = Callable[[ToolCallInfo], PreDecision]
PostHook = Callable[[ToolCallInfo, Any], Replace | None]


@dataclass(frozen=True)
class Hook:
    name: str
    pre_tool_call: PreHook | None = None
    post_tool_call: PostHook | None = None


@dataclass
class PreOutcome:
    arguments: dict[str, Any]
    decided_by: str | None = None
    decision: Deny | Replace | Stop | None = None
    hints: list[tuple[str, str]] = field(default_factory=list)  # (hook name, message)
    rewritten_by: list[str] = field(default_factory=list)


def run_pre(hooks: Sequence[Hook], call: ToolCallInfo) -> PreOutcome:
    outcome = PreOutcome(arguments=dict(call.arguments))
    for hook in hooks:
        if hook.pre_tool_call is None:
            continue
        current = ToolCallInfo(call.run_id, call.call_id, call.tool, dict(outcome.arguments), call.messages)
        decision = hook.pre_tool_call(current)
        if isinstance(decision, Rewrite):
            outcome.arguments = dict(decision.arguments)
            outcome.rewritten_by.append(hook.name)
        elif isinstance(decision, Hint):
            outcome.hints.append((hook.name, decision.message))
        elif isinstance(decision, Deny | Replace | Stop):
            outcome.decided_by, outcome.decision = hook.name, decision
            return outcome
    return outcome


@dataclass
class PostOutcome:
    result: Any
    replaced_by: str | None = None  # the last hook that replaced the result
    actions: list[tuple[str, str]] = field(default_factory=list)  # (heal kind, reason)


def run_post(hooks: Sequence[Hook], call: ToolCallInfo, result: Any) -> PostOutcome:
    """Every post hook in order; each sees the result as the hooks before it left it."""
    outcome = PostOutcome(result)
    for hook in hooks:
        if hook.post_tool_call is None:
            continue
        decision = hook.post_tool_call(call, outcome.result)
        if isinstance(decision, Replace):
            outcome.result, outcome.replaced_by = decision.result, hook.name
            if decision.action:
                outcome.actions.append((decision.action, decision.reason))
    return outcome
