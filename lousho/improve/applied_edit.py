"""An applied edit as the monitor judges it: the base revision, the applied one, and when it was applied.

One definition for everything that shows the monitor on an edit (the page, ``lousho plot monitor``). An
edit comes from ``.lousho/state.json`` (``watched``: what the watcher judges now) or from an ``apply`` line
of the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class AppliedEdit:
    """``status`` is the loop's word for it (monitoring, traffic, kept, kept-unverified, rolled-back) when it
    comes from ``state.json``; None from the audit log, which records the apply only. ``source`` says where
    it was read (``state.json``, ``audit line N`` or a file's path)."""

    before: str
    after: str
    applied_at: datetime
    status: str | None
    reason: str | None
    source: str

    @property
    def applied_ns(self) -> int:
        # Microseconds first, as analysis' live monitor does, so both count the same runs as "after".
        return int(self.applied_at.timestamp() * 1_000_000) * 1000


def edit_from(doc: dict[str, Any], at: Any, source: str) -> AppliedEdit | None:
    """The edit a ``watched`` record or an ``apply`` line describes (``at``: its ISO time), or None when it
    lacks before, after or a valid time: files a person can edit are read without trusting them."""
    before, after = doc.get("before"), doc.get("after")
    if not isinstance(before, str) or not isinstance(after, str) or not isinstance(at, str):
        return None
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    status, reason = doc.get("status"), doc.get("reason")
    return AppliedEdit(before, after, moment, str(status) if status is not None else None,
                       str(reason) if reason is not None else None, source)
