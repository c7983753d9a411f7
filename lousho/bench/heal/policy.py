"""The scripted agent model: a behavioural policy for the coding agent (and the layout check's router).

For a bug report it loads the skills whose description names the task's area, reads the task's file,
writes it back with either the right fix or a plausible wrong one, and answers in one sentence. Whether
the fix is right is a seeded draw whose probability depends on what the harness told it
(:mod:`lousho.bench.heal.rules`): an easy task, or a hard one (``add-months``, ``invoice-rounding``)
whose rule it was shown, passes with ``PASS_P``; a hard one it was not told about never does. A
harmful rule that covers the task's area makes it also edit the task's test file, which fails the run.

Draws are keyed by the attempt's seed, the request (``request.rng``, seeded by the messages) and how
often that exact request was seen (``request.count``): the same benchmark run replays the same
decisions, while repeats of one case under one harness do not all behave alike.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from lousho.bench.heal.rules import harmed_areas, knows, skill_matches
from lousho.bench.heal.tasks import Task, task_of
from lousho.models.result import content_text
from lousho.models.script import ScriptRequest

PASS_P = 0.99  # a task the model can do: near the ceiling, as the source report's flat agent was
ROUTER_MARK = "You route bug reports"  # the product layout's router says this in its instructions


@dataclass(frozen=True)
class Coder:
    """The agent model's policy for one attempt; ``seed`` keeps attempts independent."""

    seed: int
    pass_p: float = PASS_P

    def __call__(self, request: ScriptRequest) -> Any:
        return respond(request, self)


def draw(request: ScriptRequest, seed: int) -> float:
    return random.Random(f"{seed}:{request.rng.random()}:{request.count}").random()


def respond(request: ScriptRequest, coder: Coder) -> Any:
    start = max((i for i, m in enumerate(request.messages) if m.get("role") == "user"), default=-1)
    report = content_text(request.messages[start].get("content")) if start >= 0 else None
    task = task_of(report or "")
    if task is None:
        return "Send me one bug report that starts with 'Bug <task>:' and I will fix it."
    done = _calls(request.messages[start + 1:])
    if ROUTER_MARK in request.system:
        return _route(task, report or "", done)
    if "route" in request.tool_names and not _called(done, "route"):
        return _call("route", {"report": report})
    for name, description in _skills(request.system):
        if skill_matches(task.area, description) and not _called(done, "load_skill", name=name):
            return _call("load_skill", {"name": name})
    shown = request.system + "\n" + "\n".join(r for (n, _), r in done if n == "load_skill")
    read = [r for (n, a), r in done if n == "read_file" and a.get("path") == task.path]
    if not read:
        return _call("read_file", {"path": task.path})
    if not _called(done, "write_file", path=task.path):
        can = not task.hard or knows(task.id, shown)
        right = can and draw(request, coder.seed) < coder.pass_p
        content = read[-1].replace(task.buggy, task.fixed if right else task.wrong)
        return _call("write_file", {"path": task.path, "content": content})
    if task.area in harmed_areas(shown) and not _called(done, "write_file", path=task.test_path):
        return _call("write_file", {"path": task.test_path,
                                    "content": f"# Updated to match the new behaviour of {task.id}.\n"})
    return f"Fixed the {task.id} bug in {task.path}."


def _route(task: Task, report: str, done: list[tuple[tuple[str, dict[str, Any]], str]]) -> Any:
    if not _called(done, "delegate"):
        return _call("delegate", {"area": task.area, "report": report})
    result = next(r for (n, _), r in done if n == "delegate")
    return f"The {task.area} specialist answered: {result[:200]}"


def _calls(messages: list[dict[str, Any]]) -> list[tuple[tuple[str, dict[str, Any]], str]]:
    """(tool name, arguments) of each call since the report, with the text of its result."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    done = []
    for m in messages:
        for c in m.get("tool_calls") or []:
            try:
                arguments = json.loads(c["function"]["arguments"] or "{}")
            except ValueError:
                arguments = {}
            calls[c.get("id")] = (c["function"]["name"], arguments if isinstance(arguments, dict) else {})
        if m.get("role") == "tool" and m.get("tool_call_id") in calls:
            done.append((calls[m["tool_call_id"]], content_text(m.get("content")) or ""))
    return done


def _called(done: list[tuple[tuple[str, dict[str, Any]], str]], tool: str, **match: str) -> bool:
    return any(n == tool and all(a.get(k) == v for k, v in match.items()) for (n, a), _ in done)


def _skills(system: str) -> list[tuple[str, str]]:
    """The skills the system prompt lists (``- name: description`` after ``## Available skills``)."""
    _, found, listing = system.partition("## Available skills\n")
    if not found:
        return []
    skills = []
    for line in listing.splitlines():
        if not line.startswith("- "):
            break
        name, _, description = line[2:].partition(": ")
        skills.append((name.strip(), description))
    return skills


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}

