"""HTML building blocks for the daemon's page: escaping by default, the layout, small formatters.

Everything that reaches the page from spans (names, attributes, model text), audit logs or the run
store is untrusted: model output can hold ``<script>``. So every value passes through ``esc`` unless
it is a ``Safe`` fragment this module or its callers built from escaped parts. Attribute values are
quoted and escaped the same way. The page carries no script at all; the CSP forbids one anyway.
"""

from __future__ import annotations

import html
import math
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any


class Safe(str):
    """A fragment of HTML already escaped; ``esc`` passes it through unchanged."""

    __slots__ = ()


def esc(value: Any) -> Safe:
    """``value`` as HTML text: ``Safe`` fragments as they are, None as empty, the rest escaped."""
    if isinstance(value, Safe):
        return value
    if value is None:
        return Safe("")
    return Safe(html.escape(str(value), quote=True))


def join(parts: Iterable[Any], sep: str = "") -> Safe:
    return Safe(esc(sep).join(esc(p) for p in parts))


def el(tag: str, *children: Any, **attrs: Any) -> Safe:
    """``<tag attrs>children</tag>``; ``cls`` is ``class``, a trailing ``_`` is dropped (``for_``),
    ``_`` inside becomes ``-`` (``data_run``); an attribute whose value is None or False is left out."""
    rendered = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = "class" if key == "cls" else key.rstrip("_").replace("_", "-")
        # Always escaped, Safe or not: a fragment of markup is never a valid attribute value.
        rendered.append(f" {name}" if value is True else f' {name}="{html.escape(str(value), quote=True)}"')
    return Safe(f"<{tag}{''.join(rendered)}>{join(children)}</{tag}>")


def void(tag: str, **attrs: Any) -> Safe:
    """An element without content (``input``, ``meta``)."""
    return Safe(el(tag, **attrs)[: -len(f"</{tag}>")])


def href(path: str, **query: Any) -> str:
    """A same-origin link: ``path`` plus the query parameters that are not None or empty."""
    params = {k: v for k, v in query.items() if v not in (None, "", False)}
    return path + ("?" + urllib.parse.urlencode(params) if params else "")


def segment(value: str) -> str:
    """One path segment: a run id or agent name may hold ``/``, ``?`` or ``#``."""
    return urllib.parse.quote(value, safe="")


def table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], **attrs: Any) -> Safe:
    head = el("thead", el("tr", *(el("th", h) for h in headers)))
    body = el("tbody", *(row if isinstance(row, Safe) else el("tr", *(_cell(c) for c in row)) for row in rows))
    return el("table", head, body, **attrs)


def _cell(value: Any) -> Safe:
    if isinstance(value, Safe) and value.startswith("<td"):
        return value
    return el("td", value)


def dl(items: Mapping[str, Any]) -> Safe:
    return el("dl", *(Safe(el("dt", k) + el("dd", v)) for k, v in items.items() if v not in (None, "")))


def layout(title: str, body: Safe, *, active: str = "") -> Safe:
    links = [("/", "Runs"), ("/sessions", "Sessions"), ("/agents", "Agents"), ("/recovery", "Recovery")]
    nav = el("nav", *(el("a", label, href=path, cls="active" if path == active else None) for path, label in links))
    return Safe(
        "<!doctype html>"
        + el(
            "html",
            el("head", void("meta", charset="utf-8"),
               void("meta", name="viewport", content="width=device-width, initial-scale=1"),
               el("title", f"lousho · {title}"), void("link", rel="stylesheet", href=CSS_PATH)),
            el("body", el("header", el("span", "lousho observe", cls="brand"), nav), el("main", body)),
            lang="en",
        )
    )


def when(ns: int | None) -> str:
    """Nanoseconds since the epoch as UTC, to the millisecond."""
    if ns is None:
        return ""
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def millis(ns: int | float | None) -> str:
    if ns is None:
        return ""
    ms = ns / 1e6
    return f"{ms:,.1f} ms" if ms < 10_000 else f"{ms / 1000:,.2f} s"


def number(value: int | float | None, digits: int = 0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}"


def usd(value: float | None) -> str:
    """A cost in dollars: four decimals, and more below $0.0001 (a small model's call costs millionths of a
    dollar; "$0.0000" would hide it) so two significant digits show."""
    if value is None:
        return ""
    if value == 0:
        return "$0"
    digits = max(4, 1 - math.floor(math.log10(abs(value))))
    return f"${value:,.{digits}f}"


def verdict(passed: bool | None) -> Safe:
    """A run's or score's pass/fail as a badge; NULL (unscored) as a dash."""
    if passed is None:
        return el("span", "–", cls="muted", title="not scored")
    return el("span", "pass", cls="badge ok") if passed else el("span", "fail", cls="badge bad")


def short(value: Any, limit: int = 120) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


CSS_PATH = "/page.css"
# The series colours of the charts, in order; the legend's .c<i> swatches use the same ones.
COLORS = ("#2f5bd3", "#d3542f", "#1f7a43", "#8a3fd1", "#b58900", "#0f8b8d", "#c2185b", "#5d6b82")

# Served from the daemon itself (CSP style-src 'self'): no inline styles anywhere on the page.
CSS = """
:root { --fg: #1d2330; --muted: #6b7385; --line: #dde1ea; --bg: #f7f8fb; --ok: #1f7a43; --bad: #b3261e;
  --warn: #9a6700; --accent: #2f5bd3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); }
header { display: flex; gap: 24px; align-items: center; padding: 10px 24px; background: #1d2330; color: #fff; }
header .brand { font-weight: 600; }
header nav a { color: #c9d3f5; margin-right: 16px; text-decoration: none; }
header nav a.active, header nav a:hover { color: #fff; text-decoration: underline; }
main { padding: 16px 24px 48px; max-width: 1400px; }
h1 { font-size: 20px; margin: 8px 0 12px; word-break: break-all; }
h2 { font-size: 16px; margin: 28px 0 8px; }
a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #eef0f5; font-weight: 600; font-size: 12px; color: #3a4254; }
table.narrow { width: auto; min-width: 320px; }
td.nowrap { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.attempt td { background: #eef0f5; font-weight: 600; }
tr.event td { color: #3a4254; font-size: 12px; border-bottom-style: dashed; }
tr.heal td { background: #fff6e0; }
tr.bad td { background: #fdecea; }
tr.broken td { background: #fdecea; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; background: #fff; border: 1px solid var(--line);
  padding: 8px; max-height: 320px; overflow: auto; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; font-weight: 600; }
.badge.ok { background: #dff3e6; color: var(--ok); }
.badge.bad { background: #fdecea; color: var(--bad); }
.badge.warn { background: #fff1cc; color: var(--warn); }
.note { padding: 8px 12px; border-left: 4px solid var(--line); background: #fff; margin: 8px 0; }
.note.ok { border-color: var(--ok); }
.note.bad { border-color: var(--bad); }
.note.warn { border-color: var(--warn); }
form.filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: end; margin-bottom: 12px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.filters select, form.filters input[type=number] { min-width: 140px; padding: 3px; }
form.filters label.check { flex-direction: row; gap: 4px; align-items: center; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; background: #fff; padding: 8px 12px;
  border: 1px solid var(--line); }
dt { color: var(--muted); }
dd { margin: 0; word-break: break-word; }
details summary { cursor: pointer; color: var(--muted); font-size: 12px; }
dl.attributes { padding: 4px 8px; font-size: 12px; }
nav.pager { margin: 8px 0; }
svg.chart { background: #fff; border: 1px solid var(--line); max-width: 100%; height: auto; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #3a4254; }
svg.bar { display: block; }
.legend span { margin-right: 16px; font-size: 12px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
""" + "".join(f".d{i} {{ padding-left: {8 + 18 * i}px; }}\n" for i in range(16)) + "".join(
    f".c{i} {{ background: {color}; }}\n" for i, color in enumerate(COLORS))
