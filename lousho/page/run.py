"""The page of one run: its summary, the span tree of every attempt with their events, and its scores."""

from __future__ import annotations

import json
from typing import Any

from lousho.page.data import MAX_SPANS
from lousho.page.html import (
    Safe,
    dl,
    el,
    esc,
    href,
    join,
    millis,
    number,
    segment,
    short,
    table,
    verdict,
    when,
)
from lousho.page.svg import span_bar

# Event attributes shown in the tree, in this order; the rest stay in the event's details.
_HEAL_KEYS = ("heal.kind", "heal.hook", "heal.tool", "heal.reason", "heal.count")
_MAX_DEPTH_CLASS = 15


def render_run(run: dict[str, Any], spans: list[dict[str, Any]], scores: list[dict[str, Any]]) -> Safe:
    parts = [el("h1", "Run ", el("code", run["run_id"])), _summary(run)]
    parts.append(el("h2", "Span tree"))
    if len(spans) > MAX_SPANS:
        parts.append(el("p", f"The first {MAX_SPANS} spans only.", cls="note warn"))
    parts.append(_tree(spans[:MAX_SPANS]))
    parts.append(el("h2", "Scores"))
    parts.append(_scores(scores) if scores else el("p", "No score events on this run.", cls="muted"))
    return join(parts)


def _summary(run: dict[str, Any]) -> Safe:
    agent, revision = run.get("agent"), run.get("harness_revision")
    status = el("span", run["status"], cls="badge bad" if run["status"] == "error" else "badge ok")
    tokens = f"{number(run.get('input_tokens'))} in / {number(run.get('output_tokens'))} out"
    items: dict[str, Any] = {
        "agent": el("a", agent, href="/agents/" + segment(agent)) if agent else None,
        "revision": el("a", el("code", revision), href=href("/", agent=agent, revision=revision)) if revision else None,
        "case": run.get("case_id"),
        "status": status,
        "verdict": verdict(run.get("passed")),
        "attempts": run.get("attempts"),
        "started": when(run.get("started_ns")) + " UTC",
        "duration": f"{run['duration_s']:.3f} s" if run.get("duration_s") is not None else None,
        "model": run.get("model"),
        "calls": f"{run.get('model_calls') or 0} model, {run.get('tool_calls') or 0} tool",
        "tokens": tokens,
        "cost": f"${run['cost_usd']:.4f}" if run.get("cost_usd") is not None else None,
        "error": join([el("code", run.get("error_type") or ""), " ", run.get("error_message") or ""])
        if run.get("error_type") or run.get("error_message") else None,
        "healed from": _run_link(run["healed_from"]) if run.get("healed_from") else None,
        "probe": "yes (a run the improve loop made)" if run.get("probe") else None,
        "conversation": run.get("conversation_id"),
        "input": el("pre", run.get("input")) if run.get("input") else None,
        "output": el("pre", run.get("output")) if run.get("output") else None,
    }
    return dl(items)


def _run_link(run_id: str) -> Safe:
    return el("a", el("code", run_id), href="/runs/" + segment(run_id))


def _tree(spans: list[dict[str, Any]]) -> Safe:
    rows: list[Safe] = []
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    for attempt, (trace_id, members) in enumerate(traces.items(), 1):
        t0 = min(s["start_ns"] for s in members)
        total = max(s["end_ns"] for s in members) - t0
        rows.append(el("tr", el("td", f"attempt {attempt} · trace ", el("code", trace_id), colspan=6),
                       cls="attempt"))
        for depth, span in _walk(members):
            rows.append(_span_row(span, depth, t0, total))
            rows.extend(_event_rows(span, depth + 1))
    return table(["span", "status", "duration", "timeline", "details", "attributes"], rows, id="span-tree")


def _walk(members: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Depth-first in start order; a span whose parent is not here (not exported yet) is a root."""
    ids = {s["span_id"] for s in members}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in members:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, dict[str, Any]]] = []
    stack = [(0, s) for s in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        depth, span = stack.pop()
        if span["span_id"] in seen:  # a malformed cycle of parents must not loop forever
            continue
        seen.add(span["span_id"])
        out.append((depth, span))
        stack.extend((depth + 1, c) for c in reversed(children.get(span["span_id"], [])))
    return out


def _span_row(span: dict[str, Any], depth: int, t0: int, total: int) -> Safe:
    error = span["status_code"] == "ERROR"
    status = el("span", span["status_code"], cls="badge bad" if error else "muted")
    if span.get("status_message"):
        status = join([status, " ", span["status_message"]])
    details = []
    if span.get("request_model"):
        details.append(f"model {span['request_model']}")
    if span.get("tool_name"):
        details.append(f"tool {span['tool_name']}")
    if span.get("input_tokens") is not None or span.get("output_tokens") is not None:
        details.append(f"tokens {span.get('input_tokens') or 0} in / {span.get('output_tokens') or 0} out")
    if span.get("error_type"):
        details.append(f"error {span['error_type']}")
    return el(
        "tr",
        el("td", el("span", span["name"], cls="span-name"), " ", el("span", span["kind"], cls="muted"),
           cls=f"d{min(depth, _MAX_DEPTH_CLASS)}"),
        el("td", status),
        el("td", millis(span["duration_ns"]), cls="num"),
        el("td", span_bar(span["start_ns"], span["duration_ns"], t0, total, error=error)),
        el("td", "; ".join(details)),
        el("td", _details("attributes", span.get("attributes"))),
        cls="span bad" if error else "span", data_span_id=span["span_id"],
    )


def _event_rows(span: dict[str, Any], depth: int) -> list[Safe]:
    events = _load(span.get("events"))
    if not isinstance(events, list):
        return []
    rows = []
    for event in events:
        if not isinstance(event, dict):
            continue
        name, at = str(event.get("name", "")), event.get("time_ns")
        attrs = event.get("attributes") if isinstance(event.get("attributes"), dict) else {}
        if name == "heal.action":
            text = " ".join(f"{k.split('.', 1)[1]}={attrs[k]}" for k in _HEAL_KEYS if k in attrs)
            label, cls = el("span", "heal.action", cls="badge warn"), "event heal"
        elif name == "gen_ai.evaluation.result":
            text = _score_text(attrs)
            tone = {"pass": "ok", "fail": "bad"}.get(str(attrs.get("gen_ai.evaluation.score.label")), "warn")
            label, cls = el("span", "score", cls=f"badge {tone}"), "event score"
        else:
            text = short(", ".join(f"{k}={v}" for k, v in attrs.items()), 200)
            label, cls = el("span", name), "event"
        raw_name = el("span", name, cls="muted") if cls != "event" else ""
        rows.append(el("tr", el("td", label, " ", raw_name, cls=f"d{min(depth, _MAX_DEPTH_CLASS)}"),
                       el("td", text, colspan=4, title=when(at) + " UTC" if isinstance(at, int) else None),
                       el("td", _details("event", attrs)), cls=cls))
    return rows


def _score_text(attrs: dict[str, Any]) -> str:
    name = attrs.get("gen_ai.evaluation.name", "?")
    parts = [f"{name} = {attrs.get('gen_ai.evaluation.score.value', '')}",
             str(attrs.get("gen_ai.evaluation.score.label", ""))]
    if attrs.get("lousho.check.failed"):
        parts.append(f"(failed check: {attrs['lousho.check.failed']})")
    if attrs.get("gen_ai.evaluation.explanation"):
        parts.append(f"— {attrs['gen_ai.evaluation.explanation']}")
    return " ".join(p for p in parts if p)


def _scores(scores: list[dict[str, Any]]) -> Safe:
    rows = [[el("code", s["span_id"]), s["name"], el("td", number(s["score_value"], 2) if s["score_value"]
                                                        is not None else "", cls="num"),
             s["score_label"], verdict(s["passed"]), s["failed_check"], s["explanation"]] for s in scores]
    return table(["span", "name", "value", "label", "verdict", "failed check", "explanation"], rows, id="scores")


def _details(summary: str, raw: Any) -> Safe:
    value = _load(raw) if isinstance(raw, str) else raw
    if not value:
        return esc("")
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return el("details", el("summary", summary), el("pre", text))


def _load(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
