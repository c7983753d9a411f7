"""The progress guard and the output check: hooks that stop a run going nowhere.

Recovery restarts runs that were cut short; a run that is still going but stuck (calling a failing
tool again and again) needs a hook instead (seed 000, "Stop a run that makes no progress").

Both hooks decide from the transcript alone (the tool results the model has seen), never from
counters kept in memory, so a resumed run reaches the same decisions at the same calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lousho.agent.hooks import Deny, Hook, Replace, Stop, ToolCallInfo
from lousho.agent.tools import result_text

NO_PROGRESS = "LOUSHO_RUN_NO_PROGRESS"
_FAILED = "error:"


def progress_guard(max_denials: int = 3, name: str = "progress-guard") -> Hook:
    """Hint, then deny, then stop.

    - A tool result that fails the same way as the tool's previous result gets a hint added.
    - A call to a tool whose last two results failed the same way is denied (the model is told).
    - Once ``max_denials`` calls have been denied in the run, the next denial stops the run with
      ``LOUSHO_RUN_NO_PROGRESS``, recorded as not retryable: recover() will not resume it.
    """
    if max_denials < 0:
        raise ValueError("max_denials must be >= 0")
    denied_prefix = f"denied by {name}:"

    def pre(call: ToolCallInfo) -> Deny | Stop | None:
        streak, signature = _failure_streak(call.messages, call.tool, denied_prefix)
        if streak < 2:
            return None
        denials = sum(1 for m in call.messages if m.get("role") == "tool"
                      and str(m.get("content", "")).startswith(denied_prefix))
        reason = f"{call.tool} failed {streak} times in a row the same way ({signature})"
        if denials >= max_denials:
            return Stop(f"no progress: {reason}; {denials} calls were denied", code=NO_PROGRESS,
                        count=denials + 1)
        return Deny(f"{reason}; change the approach instead of calling it again", count=denials + 1)

    def post(call: ToolCallInfo, result: Any) -> Replace | None:
        text = result_text(result)
        if not text.startswith(_FAILED):
            return None
        streak, signature = _failure_streak(call.messages, call.tool, denied_prefix)
        if streak < 1 or signature != _signature(text):
            return None
        hint = (f"\n\n[hint] {call.tool} has now failed {streak + 1} times with the same error. "
                "Calling it the same way again will not help: read the error, change the arguments or use "
                "another tool.")
        return Replace(text + hint, action="hint", reason=f"{call.tool} failed the same way {streak + 1} times")

    return Hook(name, pre_tool_call=pre, post_tool_call=post)


def output_check(fn: Callable[[ToolCallInfo, Any], str | None], name: str = "output-check") -> Hook:
    """Check what a tool produced, not only whether it raised: ``fn(call, result)`` returns a problem
    (the result is then a failure the model sees, and the progress guard counts) or None.

    Put it before the progress guard in the hook list, so the guard sees its verdicts.
    """

    def post(call: ToolCallInfo, result: Any) -> Replace | None:
        text = result_text(result)
        if text.startswith(_FAILED):
            return None
        problem = fn(call, result)
        if not problem:
            return None
        return Replace(f"error: output check failed: {problem}. The tool returned: {text[:2000]}",
                       action="hint", reason=problem)

    return Hook(name, post_tool_call=post)


def _failure_streak(messages: Sequence[dict[str, Any]], tool: str, denied_prefix: str) -> tuple[int, str | None]:
    """How many of the tool's most recent results failed with the same signature, and which."""
    names: dict[str, str] = {}
    results: list[str] = []
    for message in messages:
        for tc in message.get("tool_calls") or []:
            function = tc.get("function", {})
            names[str(tc.get("id"))] = str(function.get("name", tc.get("name", "")))
        if message.get("role") == "tool" and names.get(str(message.get("tool_call_id"))) == tool:
            content = str(message.get("content", ""))
            if not content.startswith(denied_prefix):  # a denial is the guard's own word, not a result
                results.append(content)
    streak, signature = 0, None
    for content in reversed(results):
        if not content.startswith(_FAILED):
            break
        current = _signature(content)
        if signature is None:
            signature = current
        elif current != signature:
            break
        streak += 1
    return streak, signature


def _signature(text: str) -> str:
    """The failure's identity: its first line, without hints the guard appended."""
    return text.split("\n", 1)[0][:200]
