"""The loop's audit log: ``.lousho/audit.jsonl``, one hash-chained JSON line per change.

Every step of the self-healing loop that changes something appends a line. Line ``i`` is a sorted-key
JSON object with ``seq`` = ``i``, ``at`` (ISO UTC), ``action``, the caller's fields and ``prev``: the
SHA-256 of line ``i - 1``'s exact bytes (without its newline), 64 zeros on line 1. The head (line count
and the last line's hash) is kept outside the log, in ``.lousho/audit.head.json``.

What ``verify`` detects (anchors §4): a line that is not JSON; an edited line (the next line's ``prev``
no longer matches it, or for the last line the head's hash); a removed, reordered or inserted line
(``seq`` no longer equals the line number, or ``prev`` points at the wrong line); a truncated tail or an
unrecorded extra line (the head's count); a missing head.

What it cannot prove: the chain and the head live in the same directory, under the same write
permission as the loop. Whoever can write there can rewrite the whole log *and* the head consistently
(or delete both), and ``verify`` will say ok. A linear chain also cannot prove which of two readers saw
the true history. To close that gap, anchor the head outside the loop's write permissions: push
``audit.head.json`` to a protected git remote, or have a witness (a separate service, a transparency log)
record ``(count, hash)`` regularly, and compare that copy with the local head. A later head must extend
the witnessed one: its count is larger and replaying the log reaches the witnessed hash at that count.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.improve import faults
from lousho.improve.injection import plain_text
from lousho.improve.state import Paths, iso, now_utc, write_json
from lousho.kernel.errors import LoushoError

GENESIS = "0" * 64
_RESERVED = frozenset({"seq", "at", "action", "prev"})

# flock already excludes other threads on Linux (each append opens its own file description); the
# in-process lock keeps that true on platforms whose flock is per process.
_THREAD_LOCK = threading.Lock()


class AuditCorrupt(LoushoError):
    code = "LOUSHO_IMPROVE_AUDIT_CORRUPT"
    hint = "run `lousho improve audit DIR --verify` to find the first bad line; restore the log from a copy"


@dataclass(frozen=True)
class AuditVerdict:
    """The result of ``verify``. ``first_bad`` is the 1-based first line that cannot be trusted
    (one past the end for a truncated tail); None when ``ok``."""

    ok: bool
    lines: int
    first_bad: int | None
    reason: str


def line_hash(line: bytes) -> str:
    """The chain hash of one line: SHA-256 of its exact bytes, newline excluded."""
    return hashlib.sha256(line).hexdigest()


def append(paths: Paths, action: str, **fields: Any) -> dict[str, Any]:
    """Append one entry and return it as written.

    String values (also inside lists and dicts) pass through ``plain_text``: model text cannot put
    links, images or HTML into the log. Keys are kept as the caller gives them. Raises TypeError for a
    reserved key (seq, at, prev) or a value JSON cannot hold, before anything is written.

    Serialised across threads and processes by ``flock`` on ``.lousho/audit.lock``. The chain is built on
    the log's actual last line, never on the head: if the log was tampered with, the event is still
    recorded (never lose an event) and ``verify`` keeps reporting the earlier break: the head is only moved on
from a log it vouches for, so a truncated tail, an edited last line or a deleted head stays reported. Order: the head is
    rewritten with the coming line's hash as ``pending``, the line is written and fsynced, then the head is
    replaced atomically. A crash between the last two leaves one line more than the head counts, whose hash
    the head names as pending: ``verify`` accepts that one line as an append cut short, and the next append
    completes the head. Any other extra line is still reported.
    """
    reserved = sorted(_RESERVED & set(fields))
    if reserved:
        raise TypeError(f"audit fields may not use the reserved keys {reserved}")
    entry: dict[str, Any] = {key: _plain(value) for key, value in fields.items()}
    entry["action"] = plain_text(action)
    _encode(entry)  # fail on a non-JSON value before taking the lock or touching the file
    paths.ensure()
    with _THREAD_LOCK, open(paths.root / "audit.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        lines, terminated = _lines(paths.audit)
        count, last, needs_newline = len(lines), (lines[-1] if lines else b""), not terminated
        entry.update(seq=count + 1, at=iso(now_utc()), prev=line_hash(last) if count else GENESIS)
        line = _encode(entry)
        head = _read_head(paths.audit_head)
        # The head moves on only from a tail it vouches for: after a truncated tail, an edited last line or a
        # deleted head, moving it would make the tampered log verify again at the next (routine) append.
        vouched = not needs_newline and _vouches(head, paths.audit_head, lines)
        if vouched:  # a first line too: a crash before its head is told apart from a deleted head
            write_json(paths.audit_head, {"count": count, "hash": head[1] if isinstance(head, tuple) else GENESIS,
                                          "pending": {"count": count + 1, "hash": line_hash(line)}})
        _write_line((b"\n" if needs_newline else b"") + line + b"\n", paths.audit)
        faults.point(f"audit:{entry['action']}:written")
        if vouched:
            write_json(paths.audit_head, {"count": count + 1, "hash": line_hash(line)})
    return entry


def _vouches(head: tuple[int, str] | str | None, head_path: Path, lines: list[bytes]) -> bool:
    """Does the head account for the log as it is: no log and no head, the head naming the last line, or an
    append cut short between its line and the head (the head's ``pending`` naming the last line)?"""
    n = len(lines)
    if head is None or isinstance(head, str):
        return head is None and n == 0
    count, digest = head
    if count == n:
        return n == 0 or line_hash(lines[-1]) == digest
    return (count == n - 1 and _pending(head_path) == (n, line_hash(lines[-1]))
            and (count == 0 or line_hash(lines[count - 1]) == digest))


def entries(paths: Paths) -> list[dict[str, Any]]:
    """Every line of the log, in file order; raises AuditCorrupt naming the first line that is not a JSON object."""
    result = []
    for number, raw in enumerate(_lines(paths.audit)[0], 1):
        entry = _parse(raw)
        if entry is None:
            raise AuditCorrupt(f"{paths.audit}: line {number} is not a JSON object")
        result.append(entry)
    return result


def numbered_entries(paths: Paths) -> list[tuple[int, dict[str, Any] | None]]:
    """Every line as (line number, entry), None for a line that is not a JSON object: for a reader that shows
    a damaged log (next to ``verify``'s verdict) rather than refuse it, as ``entries`` does."""
    return [(number, _parse(raw)) for number, raw in enumerate(_lines(paths.audit)[0], 1)]


def verify(paths: Paths) -> AuditVerdict:
    """Check the chain line by line, then the last line against the head. Reports the first problem."""
    lines, terminated = _lines(paths.audit)
    seen: dict[str, int] = {}  # hash -> line number, to recognise a line chained past inserted ones
    for number, raw in enumerate(lines, 1):
        problem = _check_line(number, raw, lines, seen)
        if problem is not None:
            return AuditVerdict(False, len(lines), *problem)
        seen[line_hash(raw)] = number  # the latest wins: a chain link points at the nearest copy
    if lines and not terminated:
        return _broken(len(lines), len(lines), f"line {len(lines)} has no line end: the write was cut short")
    return _check_head(paths, lines)


def _check_line(number: int, raw: bytes, lines: list[bytes], seen: dict[str, int]) -> tuple[int, str] | None:
    """The first bad line and why, or None. ``seen`` holds the hashes of the lines before this one."""
    entry = _parse(raw)
    if entry is None:
        return number, f"line {number} is not valid JSON (or not a JSON object)"
    seq, prev = entry.get("seq"), entry.get("prev")
    expected = line_hash(lines[number - 2]) if number > 1 else GENESIS
    if seq == number and prev == expected:
        return None
    if isinstance(prev, str) and seen.get(prev, number - 1) < number - 1:
        # This line chains to an earlier line than its neighbour: the lines in between do not belong.
        first = seen[prev] + 1
        span = f"line {first} was" if first == number - 1 else f"lines {first}-{number - 1} were"
        return first, f"{span} inserted: line {number} chains to line {first - 1}"
    if seq != number:
        how = "a line before it was removed or lines were moved" if _after(seq, number) else (
            "a line was inserted before it or lines were moved")
        return number, f"line {number} is out of order: seq {_short(seq)} ({how})"
    if number == 1:
        return 1, "line 1 does not start the chain: its prev is not 64 zeros (lines before it were removed)"
    return number - 1, (f"line {number - 1} was edited (or line {number}'s prev was): "
                        f"line {number} does not chain to line {number - 1}")


def _check_head(paths: Paths, lines: list[bytes]) -> AuditVerdict:
    n = len(lines)
    head = _read_head(paths.audit_head)
    if head is None:
        if n == 0:
            return AuditVerdict(True, 0, None, "empty log")
        return _broken(n, n, f"the head file {paths.audit_head.name} is missing: the last line and the tail "
                              "cannot be checked")
    if isinstance(head, str):
        return _broken(n, max(n, 1), f"the head file {paths.audit_head.name} is not valid: {head}")
    count, digest = head
    if count == n == 0:  # the first append was cut short before its line: nothing was logged
        return AuditVerdict(True, 0, None, "empty log")
    if count == n - 1 and _pending(paths.audit_head) == (n, line_hash(lines[-1])) and (
            count == 0 or line_hash(lines[count - 1]) == digest):
        return AuditVerdict(True, n, None, f"{n} lines, chain and head match (the head's update for line {n} was "
                                           "cut short; the next entry completes it)")
    if count > n:
        return _broken(n, n + 1, f"the log ends at line {n} but the head says {count} lines: the tail was truncated")
    if count < n:
        if count == 0 or line_hash(lines[count - 1]) == digest:
            return _broken(n, count + 1, f"the log has {n} lines but the head says {count}: lines after line "
                                         f"{count} were added without the head (forged, or a crash mid-append)")
        return _broken(n, max(count, 1), f"the log has {n} lines but the head says {count}, and line {count} "
                                         "does not match the head's hash")
    if line_hash(lines[-1]) != digest:
        return _broken(n, n, f"line {n} was edited: its hash does not match the head")
    return AuditVerdict(True, n, None, f"{n} lines, chain and head match")


def _broken(lines: int, first_bad: int, reason: str) -> AuditVerdict:
    return AuditVerdict(False, lines, first_bad, reason)


def _read_head(path: Path) -> tuple[int, str] | str | None:
    """(count, hash); a string saying what is wrong with it; None when the file is missing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:
        return f"not JSON ({e})"
    count = data.get("count") if isinstance(data, dict) else None
    digest = data.get("hash") if isinstance(data, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or not isinstance(digest, str):
        return 'expected {"count": <lines>, "hash": <sha256 of the last line>}'
    return count, digest


def _pending(path: Path) -> tuple[int, str] | None:
    """The head's ``pending`` (count, hash): the line an append was writing when it was cut short."""
    try:
        pending = json.loads(path.read_text(encoding="utf-8")).get("pending")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    if isinstance(pending, dict) and isinstance(pending.get("count"), int) and isinstance(pending.get("hash"), str):
        return pending["count"], pending["hash"]
    return None


def _lines(path: Path) -> tuple[list[bytes], bool]:
    """The log's lines (split on b"\\n" only, so no other character can split a line) and whether
    the file ends with a newline."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], True
    if not data:
        return [], True
    terminated = data.endswith(b"\n")
    return (data[:-1] if terminated else data).split(b"\n"), terminated


def _write_line(data: bytes, path: Path) -> None:
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:  # make the new directory entry durable too
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _encode(entry: dict[str, Any]) -> bytes:
    # ASCII only (ensure_ascii): no character other than the newline we add can end a line for any reader.
    try:
        return json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    except ValueError as e:  # NaN or infinity: not JSON
        raise TypeError(f"audit fields must be JSON: {e}") from None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return entry if isinstance(entry, dict) else None


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _after(seq: Any, number: int) -> bool:
    return isinstance(seq, int) and seq > number


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
