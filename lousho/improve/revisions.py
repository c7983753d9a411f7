"""Saved revisions: ``.lousho/revisions/<rev>/`` holds a harness's files and a meta.json, saved once and never
changed. The writer saves both sides of every write before it touches the harness, so the journal can always
put the old bytes back after a crash."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lousho.improve.errors import RevisionMissing
from lousho.improve.harness import Harness
from lousho.improve.state import Paths, iso, now_utc

_REVISION = re.compile(r"[0-9a-f]{16}")


def save_revision(paths: Paths, harness: Harness) -> Path:
    """``.lousho/revisions/<rev>/``: the harness files, then meta.json (written last: a folder without it was
    cut short and is written again). Everything is fsynced: the journal relies on these bytes after a crash."""
    folder = paths.revisions / harness.revision
    if (folder / "meta.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in harness.files.items():
        out = folder / "files" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_synced(out, text)
    meta = {"revision": harness.revision, "saved_at": iso(now_utc()), "files": sorted(harness.files),
            "read_only": sorted(harness.read_only)}
    _write_synced(folder / "meta.json", json.dumps(meta, sort_keys=True) + "\n")
    return folder


def load_revision(paths: Paths, revision: str) -> Harness:
    """A saved revision; RevisionMissing when it is not saved, or its files no longer hash to its name."""
    if not _REVISION.fullmatch(str(revision)):  # a typed --to: never a path, never an OS error on a long name
        raise RevisionMissing(f"{str(revision)[:40]!r} is not a revision: a revision is 16 lowercase hex digits")
    folder = paths.revisions / revision
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        files = {rel: (folder / "files" / rel).read_bytes().decode("utf-8") for rel in meta["files"]}
    except FileNotFoundError:
        raise RevisionMissing(f"no saved revision {revision!r} in {paths.revisions}") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise RevisionMissing(f"the saved revision {revision!r} is damaged: {e}") from None
    harness = Harness(files, frozenset(meta.get("read_only", [])))
    if harness.revision != revision:
        raise RevisionMissing(f"the saved revision {revision!r} is damaged: its files hash to {harness.revision}")
    return harness


def saved_revisions(paths: Paths) -> list[str]:
    if not paths.revisions.is_dir():
        return []
    return sorted(p.name for p in paths.revisions.iterdir() if (p / "meta.json").exists())


def _write_synced(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
