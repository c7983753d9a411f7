"""What the page reads from a registered agent directory's ``.lousho/``: the watched edit and the audit log.

These files are contracts between parts, read here as data (observe imports no other lousho part):

- ``state.json``: ``watched`` = {before, after, applied_at (ISO UTC), status, ...} is the applied edit
  the monitor watches;
- ``audit.jsonl``: one sorted-key JSON object per line; line ``i`` has ``seq`` = ``i`` and ``prev`` = the
  SHA-256 of line ``i - 1``'s exact bytes (64 zeros on line 1); ``audit.head.json`` = {count, hash} of
  the whole log. ``verify_audit`` checks exactly that and reports the first line it cannot trust; the
  improve part's verifier also explains *how* a chain broke (inserted, moved), which the page does not need.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
# The page shows the newest entries only; the verdict still covers every line.
SHOWN_ENTRIES = 200


@dataclass(frozen=True)
class AppliedEdit:
    """An edit the monitor can judge: the revision before, the revision applied, and when."""

    before: str
    after: str
    applied_at: datetime
    status: str | None
    reason: str | None
    source: str  # "state.json" or "audit line N"

    @property
    def applied_ns(self) -> int:
        # Microseconds first, as analysis' live monitor does, so both count the same runs as "after".
        return int(self.applied_at.timestamp() * 1_000_000) * 1000


@dataclass(frozen=True)
class AuditVerdict:
    ok: bool
    lines: int
    first_bad: int | None
    reason: str


@dataclass(frozen=True)
class AuditLog:
    verdict: AuditVerdict
    entries: list[tuple[int, dict[str, Any] | None]]  # (line number, entry or None when not JSON), newest last


def watched_edit(state_dir: Path) -> AppliedEdit | str | None:
    """The watched edit of ``state.json``; a string saying what is wrong; None when there is none."""
    path = state_dir / "state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"{path.name} cannot be read: {e}"
    watched = state.get("watched") if isinstance(state, dict) else None
    if not watched:
        return None
    if not isinstance(watched, dict):  # a hand-edited or corrupt file: say so, never a 500
        return f"{path.name}: watched is not an object"
    edit = _edit(watched, watched.get("applied_at"), "state.json")
    return edit if edit is not None else f"{path.name}: watched lacks before, after or a valid applied_at"


def applied_edits(log: AuditLog) -> list[tuple[int, AppliedEdit]]:
    """Every ``apply`` line of the audit log as (line number, edit), oldest first."""
    edits = []
    for number, entry in log.entries:
        if entry is not None and entry.get("action") == "apply":
            edit = _edit(entry, entry.get("at"), f"audit line {number}")
            if edit is not None:
                edits.append((number, edit))
    return edits


def _edit(doc: dict[str, Any], at: Any, source: str) -> AppliedEdit | None:
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


def read_audit(state_dir: Path) -> AuditLog:
    """The log's entries and the chain's verdict (see the module docstring for the rule)."""
    try:
        data = (state_dir / "audit.jsonl").read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as e:  # unreadable (permissions, a directory): say so on the page rather than fail it
        return AuditLog(AuditVerdict(False, 0, 1, f"audit.jsonl cannot be read: {e}"), [])
    terminated = not data or data.endswith(b"\n")
    lines = (data[:-1] if data.endswith(b"\n") else data).split(b"\n") if data else []
    entries = [(number, _parse(raw)) for number, raw in enumerate(lines, 1)]
    return AuditLog(_verify(state_dir, lines, entries, terminated), entries)


def _verify(state_dir: Path, lines: list[bytes], entries: list[tuple[int, dict[str, Any] | None]],
            terminated: bool) -> AuditVerdict:
    n = len(lines)
    prev = GENESIS
    for (number, entry), raw in zip(entries, lines, strict=True):
        if entry is None:
            return AuditVerdict(False, n, number, f"line {number} is not a JSON object")
        if entry.get("seq") != number:
            return AuditVerdict(False, n, number, f"line {number} has seq {entry.get('seq')!r}: lines were "
                                                  "removed, inserted or moved")
        if entry.get("prev") != prev:
            bad = max(number - 1, 1)
            return AuditVerdict(False, n, bad, f"line {number} does not chain to line {number - 1}: "
                                               f"line {bad} was edited, or lines before it removed")
        prev = hashlib.sha256(raw).hexdigest()
    if not terminated:
        return AuditVerdict(False, n, n, f"line {n} has no line end: the write was cut short")
    return _check_head(state_dir / "audit.head.json", n, prev)


def _check_head(path: Path, n: int, last_hash: str) -> AuditVerdict:
    try:
        head = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if n == 0:
            return AuditVerdict(True, 0, None, "no audit log yet")
        return AuditVerdict(False, n, n, f"{path.name} is missing: the tail cannot be checked")
    except (OSError, ValueError) as e:
        return AuditVerdict(False, n, max(n, 1), f"{path.name} cannot be read: {e}")
    count = head.get("count") if isinstance(head, dict) else None
    digest = head.get("hash") if isinstance(head, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(digest, str):
        return AuditVerdict(False, n, max(n, 1), f'{path.name} is not {{"count": ..., "hash": ...}}')
    if count != n:
        return AuditVerdict(False, n, min(count, n) + 1,
                            f"the log has {n} lines but the head says {count}: truncated, or lines added "
                            "without the head")
    if n and digest != last_hash:
        return AuditVerdict(False, n, n, f"line {n} does not match the head's hash: it was edited")
    return AuditVerdict(True, n, None, f"{n} lines, chain and head match")


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return entry if isinstance(entry, dict) else None
