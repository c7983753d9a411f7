"""The page of one run: its summary, the span tree of every attempt with their events, and its scores."""

from __future__ import annotations

from typing import Any

from lousho.page.data import MAX_SCORES, SPANS_PER_PAGE
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
    usd,
    verdict,
    when,
)
from lousho.page.paging import Page, pager
from lousho.page.svg import span_bar
from lousho.page.values import EXCERPT_CHARS, Excerpts, attributes_list, load, span_link

# Event attributes shown in the tree, in this order; the rest stay in the event's details.
_HEAL_KEYS = ("heal.kind", "heal.hook", "heal.tool", "heal.reason", "heal.count")
_MAX_DEPTH_CLASS = 15
# Events of one span the tree lists; the span's events link holds them all.
_SHOWN_EVENTS = 50


def render_run(run: dict[str, Any], spans: list[dict[str, Any]], scores: list[dict[str, Any]], page: Page) -> Safe:
    """The run's page; ``spans`` is one page of its spans and one more when there are more."""
    excerpts = Excerpts()
    parts = [el("h1", "Run ", el("code", run["run_id"])), _summary(run)]
    parts.append(el("h2", "Span tree"))
    more = len(spans) > SPANS_PER_PAGE
    links = pager("/runs/" + segment(run["run_id"]), page, more)
    if more or page.number > 1:
        first = page.offset + 1
        parts.append(el("p", f"Spans {first:,} to {page.offset + min(len(spans), SPANS_PER_PAGE):,}, "
                        f"{SPANS_PER_PAGE} a page, in start order; a span whose parent is on another page "
                        "starts at the left.", cls="note warn"))
    parts.extend([links, _tree(spans[:SPANS_PER_PAGE], excerpts), links])
    parts.append(el("h2", "Scores"))
    if len(scores) > MAX_SCORES:
        parts.append(el("p", f"The first {MAX_SCORES} scores only.", cls="note warn"))
    parts.append(_scores(scores[:MAX_SCORES], excerpts) if scores else el("p", "No score events on this run.",
                                                                             cls="muted"))
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
        "cost": usd(run.get("cost_usd")) or None,
        "error": join([el("code", run.get("error_type") or ""), " ", _cut(run, "error_message")])
        if run.get("error_type") or run.get("error_message") else None,
        "healed from": _run_link(run["healed_from"]) if run.get("healed_from") else None,
        "probe": "yes (a run the improve loop made)" if run.get("probe") else None,
        "conversation": run.get("conversation_id"),
        "input": el("pre", _cut(run, "input")) if run.get("input") else None,
        "output": el("pre", _cut(run, "output")) if run.get("output") else None,
    }
    return dl(items)


def _cut(run: dict[str, Any], column: str) -> Safe:
    """A value the query cut to its first ``EXCERPT_CHARS`` characters, with a link to the whole."""
    chars = run.get(f"{column}_chars") or 0
    if chars <= EXCERPT_CHARS:
        return esc(run.get(column))
    link = href("/runs/" + segment(run["run_id"]), value=column.removesuffix("_message"))
    return join([run[column], " ", el("a", f"… the whole value ({chars:,} characters)", href=link,
                                      cls="full-value")])


def _run_link(run_id: str) -> Safe:
    return el("a", el("code", run_id), href="/runs/" + segment(run_id))


def _tree(spans: list[dict[str, Any]], excerpts: Excerpts) -> Safe:
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
            rows.append(_span_row(span, depth, t0, total, excerpts))
            rows.extend(_event_rows(span, depth + 1, excerpts))
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


def _span_row(span: dict[str, Any], depth: int, t0: int, total: int, excerpts: Excerpts) -> Safe:
    error = span["status_code"] == "ERROR"
    status = el("span", span["status_code"], cls="badge bad" if error else "muted")
    if span.get("status_message"):  # the query cut it one past the excerpt: longer means cut
        message = span["status_message"]
        status = join([status, " ", message[:EXCERPT_CHARS] + ("…" if len(message) > EXCERPT_CHARS else "")])
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
        el("td", _attributes(span, excerpts)),
        cls="span bad" if error else "span", data_span_id=span["span_id"],
    )


def _attributes(span: dict[str, Any], excerpts: Excerpts) -> Safe:
    attrs = load(span.get("attributes"))
    return attributes_list(attrs if isinstance(attrs, dict) else {}, excerpts, span["trace_id"], span["span_id"])


def _event_rows(span: dict[str, Any], depth: int, excerpts: Excerpts) -> list[Safe]:
    events = load(span.get("events"))
    if not isinstance(events, list):
        return []
    rows = []
    for index, event in enumerate(events[:_SHOWN_EVENTS]):
        if not isinstance(event, dict):
            continue
        name, at = short(str(event.get("name", "")), 200), event.get("time_ns")
        attrs = event.get("attributes") if isinstance(event.get("attributes"), dict) else {}
        if name == "heal.action":
            text = " ".join(f"{k.split('.', 1)[1]}={short(attrs[k], 200)}" for k in _HEAL_KEYS if k in attrs)
            label, cls = el("span", "heal.action", cls="badge warn"), "event heal"
        elif name == "gen_ai.evaluation.result":
            text = short(_score_text(attrs), 500)
            tone = {"pass": "ok", "fail": "bad"}.get(str(attrs.get("gen_ai.evaluation.score.label")), "warn")
            label, cls = el("span", "score", cls=f"badge {tone}"), "event score"
        else:
            text = short(", ".join(f"{k}={v}" for k, v in attrs.items()), 200)
            label, cls = el("span", name), "event"
        raw_name = el("span", name, cls="muted") if cls != "event" else ""
        rows.append(el("tr", el("td", label, " ", raw_name, cls=f"d{min(depth, _MAX_DEPTH_CLASS)}"),
                       el("td", text, colspan=4, title=when(at) + " UTC" if isinstance(at, int) else None),
                       el("td", attributes_list(attrs, excerpts, span["trace_id"], span["span_id"], event=index)),
                       cls=cls))
    if len(events) > _SHOWN_EVENTS:
        everything = span_link(span["trace_id"], span["span_id"], events=True)
        rows.append(el("tr", el("td", el("a", f"all {len(events):,} events", href=everything), colspan=6,
                                cls=f"d{min(depth, _MAX_DEPTH_CLASS)}"), cls="event"))
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


def _scores(scores: list[dict[str, Any]], excerpts: Excerpts) -> Safe:
    rows = [[el("code", s["span_id"]), short(s["name"], 200), el("td", number(s["score_value"], 2) if s["score_value"]
                                                                    is not None else "", cls="num"),
             short(s["score_label"], 200), verdict(s["passed"]), short(s["failed_check"], 200),
             excerpts.show(s["explanation"] or "", None)] for s in scores]
    return table(["span", "name", "value", "label", "verdict", "failed check", "explanation"], rows, id="scores")
