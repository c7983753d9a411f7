"""Long values on the page: excerpts with a link to the whole, and the plain-text answer behind that link.

A span attribute may hold megabytes (a whole prompt, a file a tool read); escaped into HTML a value grows
up to six times. So the page shows each value's first ``EXCERPT_CHARS`` characters, and one page at most
``PAGE_CHARS`` of them in all, and links each cut value to ``/spans/{trace_id}/{span_id}?attribute=KEY``
(``&event=N`` for the N-th event's, from 0), which answers that one value as ``text/plain``: a string as
it is, any other value as JSON. Without ``attribute`` it answers all the span's (or event's) attributes as
JSON, and with ``events=all`` all its events. The answer is never bigger than the store's own copy.
"""

from __future__ import annotations

import json
from typing import Any

from lousho.kernel.errors import UsageError
from lousho.page.html import Safe, el, esc, href, join, segment

EXCERPT_CHARS = 2000
# Of all the values one page shows; past it each value is only its link.
PAGE_CHARS = 200_000
# Attributes (or events) of one span the page lists; the link holds them all.
SHOWN_ATTRIBUTES = 100
# A key longer than this is shown cut and gets no link: its full value is in the span's attributes link.
LINKED_KEY_CHARS = 1000


class BadValueParameter(UsageError):
    code = "LOUSHO_PAGE_BAD_PARAMETER"
    hint = "event is a whole number from 0 (the span's first event); attribute is a key of its attributes"


class Excerpts:
    """The values of one page: each cut to ``EXCERPT_CHARS``, all of them together to ``PAGE_CHARS``."""

    def __init__(self, budget: int = PAGE_CHARS) -> None:
        self.left = budget

    def show(self, value: Any, link: str | None) -> Safe:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        room = min(EXCERPT_CHARS, self.left)
        if len(text) <= room:
            self.left -= len(text)
            return esc(text)
        self.left -= room
        whole = f"{len(text):,} characters"
        more = el("a", f"… the whole value ({whole})", href=link, cls="full-value") if link else esc(f"… ({whole})")
        return join([text[:room], " ", more])


def span_link(trace_id: str, span_id: str, *, event: int | None = None, attribute: str | None = None,
              events: bool = False) -> str:
    return href(f"/spans/{segment(trace_id)}/{segment(span_id)}", event=event, attribute=attribute,
                events="all" if events else None)


def attributes_list(attrs: dict[str, Any], excerpts: Excerpts, trace_id: str, span_id: str, *,
                    event: int | None = None) -> Safe:
    """A span's (or its ``event``-th event's) attributes: each key with its excerpt, in a ``details``."""
    if not attrs:
        return esc("")
    items = []
    for key, value in list(attrs.items())[:SHOWN_ATTRIBUTES]:
        link = span_link(trace_id, span_id, event=event, attribute=key) if len(key) <= LINKED_KEY_CHARS else None
        items.append(el("dt", key if len(key) <= 200 else key[:200] + "…"))
        items.append(el("dd", excerpts.show(value, link)))
    if len(attrs) > SHOWN_ATTRIBUTES:
        items.append(el("dt", "…"))
        everything = span_link(trace_id, span_id, event=event)
        items.append(el("dd", el("a", f"all {len(attrs):,} attributes", href=everything)))
    label = "attributes" if event is None else "event"
    return el("details", el("summary", f"{label} ({len(attrs):,})"), el("dl", *items, cls="attributes"))


def event_index(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        raise BadValueParameter(f"event={raw[:40]!r} is not an event number")
    return int(raw)


def full_value(stored: Any, event: int | None, attribute: str | None) -> str | None:
    """The text the full-value link answers: one attribute's value, or all of them as JSON; None when the
    span has no such event or attribute. ``stored`` is the store's JSON text of the span's events when
    ``event`` is given, else of its attributes."""
    if event is not None:
        found = load(stored)
        if not isinstance(found, list) or event >= len(found) or not isinstance(found[event], dict):
            return None
        attrs = found[event].get("attributes")
    else:
        attrs = load(stored)
    attrs = attrs if isinstance(attrs, dict) else {}
    if attribute is None:
        return json.dumps(attrs, indent=2, ensure_ascii=False, default=str)
    if attribute not in attrs:
        return None
    value = attrs[attribute]
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)


def load(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
