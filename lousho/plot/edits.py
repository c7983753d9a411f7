"""Which applied edit a monitor plot draws: the one the loop watches, or one named from the audit log.

Read-only: the loop's files (``state.json``, ``audit.jsonl``) are read through improve's own readers
and never written, so a plot can run next to a live watcher.
"""

from __future__ import annotations

from pathlib import Path

from lousho.improve.applied_edit import AppliedEdit
from lousho.improve.audit import entries
from lousho.improve.state import Paths, load_state, parse_iso
from lousho.plot.errors import NoWatchedEdit


def watched_edit(agent_dir: Path) -> AppliedEdit:
    """The edit in ``<agent_dir>/.lousho/state.json`` (``watched``), whatever its status now."""
    paths = Paths(agent_dir)
    watched = load_state(paths).watched if paths.state.exists() else None
    if not watched:
        raise NoWatchedEdit(f"{paths.state}: no applied edit is watched")
    if not watched.applied_at:
        # A traffic-canary candidate is watched before it is written: it has no apply time yet.
        raise NoWatchedEdit(f"{paths.state}: the watched edit ({watched.status}) has no applied_at: it was "
                            "never applied")
    return AppliedEdit(watched.before, watched.after, parse_iso(watched.applied_at), status=watched.status,
                       reason=None, source=str(paths.state))


def applied_edit(agent_dir: Path, revision: str) -> AppliedEdit:
    """The latest ``apply`` in the audit log whose applied revision is ``revision`` (or starts with it)."""
    paths = Paths(agent_dir)
    applies = [e for e in _audit(paths) if e.get("action") == "apply" and str(e.get("after", "")).startswith(revision)]
    if not revision or not applies:
        known = ", ".join(sorted({str(e.get("after")) for e in _audit(paths) if e.get("action") == "apply"})) or "none"
        raise NoWatchedEdit(f"{paths.audit}: no apply of revision {revision!r} (applied revisions: {known})")
    last = applies[-1]
    return AppliedEdit(str(last["before"]), str(last["after"]), parse_iso(str(last["at"])), status=None, reason=None,
                       source=str(paths.audit))


def judged_revisions(agent_dir: Path) -> list[str]:
    """Applied revisions the monitor reached a decision on, oldest first (for hints: these have live runs)."""
    judged: list[str] = []
    applied: str | None = None
    for entry in _audit(Paths(agent_dir)):
        if entry.get("action") == "apply":
            applied = str(entry.get("after"))
        elif entry.get("action") == "monitor" and applied and applied not in judged:
            judged.append(applied)
    return judged


def _audit(paths: Paths) -> list[dict[str, object]]:
    return entries(paths) if paths.audit.exists() else []
