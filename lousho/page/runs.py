"""The runs list (``/``): the filter form, the table of the newest runs, and why it is empty when it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lousho.observe.client.empty_runs import HAS_RUN_SQL, explain
from lousho.page.data import Reader
from lousho.page.html import Safe, el, href, join, millis, number, segment, short, table, verdict, void, when

MAX_LIMIT = 1000


def _options(values: Sequence[str], chosen: str | None, everything: str) -> list[Safe]:
    options = [el("option", everything, value="", selected=chosen is None)]
    if chosen is not None and chosen not in values:
        values = [chosen, *values]
    options.extend(el("option", v, value=v, selected=v == chosen) for v in values)
    return options


def filters(agent_names: Sequence[str], revision_list: Sequence[str], agent: str | None, revision: str | None,
             failed: bool, limit: int) -> Safe:
    return el(
        "form",
        el("label", "agent", el("select", *_options(agent_names, agent, "all agents"), name="agent",
                                id="filter-agent")),
        el("label", "harness revision", el("select", *_options(revision_list, revision, "all revisions"),
                                           name="revision", id="filter-revision")),
        el("label", void("input", type="checkbox", name="failed", value="1", checked=failed, id="filter-failed"),
           "failed only", cls="check"),
        el("label", "at most", void("input", type="number", name="limit", value=limit, min=1, max=MAX_LIMIT)),
        el("button", "Filter", type="submit", id="filter-apply"),
        el("a", "clear", href="/"),
        method="get", action="/", cls="filters",
    )


def why_empty(reader: Reader, agent: str | None) -> Safe:
    spans = reader.rows("SELECT count(*) AS n FROM spans")[0]["n"]
    runs = reader.rows(HAS_RUN_SQL)[0]["n"] if spans and agent else 0
    note = explain(spans, runs, agent)
    return el("p", note, cls="note", id="why-no-runs") if note else join([])


def runs_table(rows: list[dict[str, Any]], limit: int) -> Safe:
    if not rows:
        return el("p", "No runs match.", cls="muted", id="no-runs")
    body = []
    for r in rows:
        failed = r["status"] == "error" or r["passed"] is False
        status = el("span", r["status"], cls="badge bad" if r["status"] == "error" else "muted")
        body.append(el(
            "tr",
            el("td", when(r["started_ns"])),
            el("td", el("a", el("code", r["run_id"]), href="/runs/" + segment(r["run_id"]), cls="run-link")),
            el("td", el("a", r["agent"], href="/agents/" + segment(r["agent"])) if r["agent"] else ""),
            el("td", el("a", el("code", r["harness_revision"]), href=href("/", agent=r["agent"],
                                                                          revision=r["harness_revision"]))
               if r["harness_revision"] else ""),
            el("td", r["case_id"]),
            el("td", status),
            el("td", verdict(r["passed"]), cls="verdict"),
            el("td", r["attempts"], cls="num"),
            el("td", millis(r["duration_s"] * 1e9) if r["duration_s"] is not None else "", cls="num"),
            el("td", number((r["input_tokens"] or 0) + (r["output_tokens"] or 0)), cls="num"),
            el("td", short(" ".join(x for x in (r["error_type"], r["error_message"]) if x), 80)),
            el("td", el("a", el("code", r["healed_from"]), href="/runs/" + segment(r["healed_from"]))
               if r["healed_from"] else ""),
            cls="run failed" if failed else "run",
        ))
    caption = el("p", f"{len(rows)} run(s), newest first" + (f" (at most {limit})" if len(rows) >= limit else ""),
                 cls="muted")
    headers = ["started (UTC)", "run", "agent", "revision", "case", "status", "verdict", "attempts", "duration",
               "tokens", "error", "healed from"]
    return join([caption, table(headers, body, id="runs")])
