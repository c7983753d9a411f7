"""What the page reads from a registered agent directory's ``.lousho/``: the watched edit and the audit log.

Through improve's own readers (``improve.audit``: the hash chain's rule and its verifier; ``improve.applied_edit``),
tolerantly: a hand-edited or damaged file is a note on the page, never a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.improve.applied_edit import AppliedEdit, edit_from
from lousho.improve.audit import AuditVerdict, numbered_entries, verify
from lousho.improve.state import Paths

# The page shows the newest entries only; the verdict still covers every line.
SHOWN_ENTRIES = 200


@dataclass(frozen=True)
class AuditLog:
    verdict: AuditVerdict
    entries: list[tuple[int, dict[str, Any] | None]]  # (line number, entry or None when not JSON), newest last


def watched_edit(state_dir: Path) -> AppliedEdit | str | None:
    """The watched edit of ``state.json``; a string saying what is wrong; None when there is none."""
    path = state_dir / "state.json"
    if not path.exists():  # no loop has run here yet
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"{path.name} cannot be read: {e}"
    watched = state.get("watched") if isinstance(state, dict) else None
    if not watched:
        return None
    if not isinstance(watched, dict):  # a hand-edited or corrupt file: say so, never a 500
        return f"{path.name}: watched is not an object"
    edit = edit_from(watched, watched.get("applied_at"), "state.json")
    return edit if edit is not None else f"{path.name}: watched lacks before, after or a valid applied_at"


def applied_edits(log: AuditLog) -> list[tuple[int, AppliedEdit]]:
    """Every ``apply`` line of the audit log as (line number, edit), oldest first."""
    edits = []
    for number, entry in log.entries:
        if entry is not None and entry.get("action") == "apply":
            edit = edit_from(entry, entry.get("at"), f"audit line {number}")
            if edit is not None:
                edits.append((number, edit))
    return edits


def read_audit(state_dir: Path) -> AuditLog:
    """The log's entries (a line that is not a JSON object as None) and improve's verdict on the chain."""
    paths = Paths(state_dir.parent)
    try:
        return AuditLog(verify(paths), numbered_entries(paths))
    except OSError as e:  # unreadable (permissions, a directory): say so on the page rather than fail it
        return AuditLog(AuditVerdict(False, 0, 1, f"audit.jsonl cannot be read: {e}"), [])
