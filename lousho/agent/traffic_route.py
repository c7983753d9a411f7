"""Which harness serves a session while the loop splits traffic: the agent side of seed §4.2.

The loop (``lousho.improve.traffic``) splits sessions two ways, both through this one router:

- a **canary** (``kind`` ``canary``): before a write, the candidate harness is materialised into a full copy
  of the agent directory and serves a bounded share of new sessions; the directory serves the rest;
- a **holdback** (``kind`` ``holdback``): after a write, while the monitor watches the edit, the *base*
  revision is materialised into a copy and keeps a share of sessions (10-25%), so the monitor compares the
  two revisions on the same hours, mix and outages; the directory (now holding the edit) serves the rest.

Either way the loop writes ``<agent_dir>/.lousho/traffic.json``; the agent calls ``route(agent_dir,
session_id)`` before it loads a directory. The two sides share nothing but this file (``lousho.agent`` never
imports ``lousho.improve``, DESIGN §1), so its format is the contract. The arms are named by revision in both
kinds: ``candidate`` is the new harness (the canary's candidate, the holdback's applied edit), ``base`` the one
it would replace or replaced; ``directory`` names the copy, which serves the canary's candidate arm and the
holdback's base arm.

``<agent_dir>/.lousho/traffic.json`` (version 1), one sorted-key JSON object:

==================== ========================== ============================================================
key                  type                       meaning
==================== ========================== ============================================================
``version``          int                        ``1``
``kind``             str (absent: ``canary``)   ``canary`` or ``holdback``
``status``           str                        ``running``, or how it ended (a canary: ``promoted`` or
                                                ``retired``; a holdback: ``ended``); only ``running`` routes
``share``            float in (0, 1]            a canary: the most the candidate may hold of the sessions
                                                assigned since it started, at every moment (seeds: 0.25);
                                                a holdback: the chance a session is held back on the base
``max_sessions``     int >= 0                   a canary: the most sessions the candidate may ever get
                                                (seeds: 50); a holdback has none
``salt``             str (a holdback only)      the key of the holdback's session hash (below)
``directory``        str                        the copy's agent directory, relative to the agent
                                                directory, under ``.lousho/traffic/<the copy's revision>/``
``assignments``      {session id: arm}          a canary: every session assigned while running; arm is
                                                ``candidate`` or ``base``. A holdback: always empty
``base_revision``    str                        the loop's bookkeeping, which routing does not read:
``candidate_revision`` str                      the two harness revisions,
``agent``            str                        the agent's name in telemetry,
``proposal_id``      str | null                 the proposal under test,
``started_at``       ISO 8601 UTC               when routing began (runs before it are not the split's),
``finished_at``      ISO 8601 UTC | null        and when it ended
==================== ========================== ============================================================

Rules ``route`` keeps for a canary, under an exclusive ``fcntl.flock`` on ``<agent_dir>/.lousho/traffic.lock``
(so they hold across threads and processes; the file is replaced atomically, so a reader without the lock
sees the old or the new file, never half of one):

- A session already assigned keeps its arm for as long as the canary runs (sticky).
- A new session goes to the candidate only if, counting it, the candidate holds at most
  ``max_sessions`` sessions and at most ``share`` of all sessions assigned; otherwise to the base. So the
  share bound holds at every prefix of the session sequence, from the first session on.
- Any writer of the file (the loop's start and finish) takes the same lock, so no assignment is lost and
  no finished canary is reopened by a late router.

For a holdback a session is held back on the base when the first 8 bytes of SHA-256(``salt`` NUL session
id), read as an unsigned integer u, have u < ``share`` x 2^64: a random assignment by session (the monitor's
variance is by session), sticky without any state, independent of arrival order, and new with each
holdback's salt (the same users are not held back from every edit). Nothing is written per session, so a
week of traffic leaves the file as it was; the base holds ``share`` of the sessions in expectation, with a
binomial spread, never a bound. A held-back session's runs carry the arm ``base``, every other session's
``candidate``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any

from lousho.kernel._checked_json import loads_checked
from lousho.kernel.errors import UsageError

VERSION = 1
TRAFFIC_FILE = PurePosixPath(".lousho/traffic.json")
LOCK_FILE = PurePosixPath(".lousho/traffic.lock")
CANDIDATES_DIR = PurePosixPath(".lousho/traffic")
RUNNING = "running"
CANDIDATE = "candidate"
BASE = "base"
CANARY = "canary"
HOLDBACK = "holdback"
KINDS = (CANARY, HOLDBACK)


class TrafficFileInvalid(UsageError):
    """``.lousho/traffic.json`` does not follow the contract above; the message names the problem."""

    code = "LOUSHO_AGENT_TRAFFIC_FILE_INVALID"
    hint = ("the improve loop writes .lousho/traffic.json; finish the canary with the loop, or remove the "
            "file to serve the agent directory alone")


@dataclass(frozen=True)
class Route:
    """The directory to load the agent from, and the arm to label the run with (None: no canary)."""

    directory: Path
    arm: str | None


def route(agent_dir: Path, session_id: str) -> Route:
    """Which directory serves ``session_id``, assigning the session to an arm if it is new.

    Without a running canary or holdback this is the agent directory and no arm, and nothing is written.
    """
    root = Path(agent_dir)
    # Unlocked look first: the file is replaced atomically, and most directories split no traffic.
    data = read_traffic(root)
    if data is None or data.get("status") != RUNNING:
        return Route(root, None)
    if data.get("kind", CANARY) == HOLDBACK:  # a pure function of the session: no lock, nothing written
        if held_back(data, session_id):
            return Route(_copy_dir(root, data), BASE)
        return Route(root, CANDIDATE)
    with locked(root):
        data = read_traffic(root)  # again under the lock: another process may have assigned or finished
        if data is None or data.get("status") != RUNNING:
            return Route(root, None)
        candidate_dir = _copy_dir(root, data)
        arm = data["assignments"].get(session_id)
        if arm is None:
            arm = _next_arm(data)
            data["assignments"][session_id] = arm
            write_traffic(root, data)
    return Route(candidate_dir if arm == CANDIDATE else root, arm)


def read_traffic(agent_dir: Path) -> dict[str, Any] | None:
    """The checked contents of the traffic file, or None when there is none."""
    path = Path(agent_dir) / TRAFFIC_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no file, or no agent directory: no canary
        return None
    try:
        return loads_checked(text, _problem)
    except ValueError as e:
        raise TrafficFileInvalid(f"{path}: {e}") from None


def write_traffic(agent_dir: Path, data: dict[str, Any]) -> None:
    """Replace the traffic file atomically; call it holding ``locked(agent_dir)``."""
    problem = _problem(data)
    if problem:
        raise TrafficFileInvalid(f"refusing to write an invalid traffic file: {problem}")
    path = Path(agent_dir) / TRAFFIC_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@contextmanager
def locked(agent_dir: Path) -> Iterator[None]:
    """Hold the traffic lock: exclusive across processes, and across threads too, because each holder
    opens the lock file anew and flock locks belong to the open file, not to the process."""
    path = Path(agent_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor of the open file releases its lock


def _next_arm(data: dict[str, Any]) -> str:
    arms = list(data["assignments"].values())
    candidates = arms.count(CANDIDATE) + 1
    # Exact arithmetic on the share as written (0.25, 0.1), so the bound is never crossed by rounding.
    share = Fraction(repr(float(data["share"])))
    if candidates <= data["max_sessions"] and candidates <= share * (len(arms) + 1):
        return CANDIDATE
    return BASE


def held_back(data: dict[str, Any], session_id: str) -> bool:
    """Is ``session_id`` held back on the base by the holdback ``data`` describes (the hash rule above)?"""
    digest = hashlib.sha256(f"{data['salt']}\0{session_id}".encode()).digest()
    share = Fraction(repr(float(data["share"])))  # exact, as the canary's bound
    return int.from_bytes(digest[:8], "big") * share.denominator < share.numerator * 2**64


def _copy_dir(root: Path, data: dict[str, Any]) -> Path:
    directory = root / data["directory"]
    if not directory.is_dir():
        raise TrafficFileInvalid(f"{root / TRAFFIC_FILE}: the copy's directory {directory} is missing")
    return directory


def _problem(data: Any) -> str | None:
    """Why ``data`` breaks the contract, or None."""
    if not isinstance(data, dict):
        return "expected a JSON object"
    if data.get("version") != VERSION:
        return f"version must be {VERSION}"
    kind = data.get("kind", CANARY)
    if kind not in KINDS:
        return "kind must be " + " or ".join(repr(k) for k in KINDS)
    if not isinstance(data.get("status"), str):
        return "status must be a string"
    share = data.get("share")
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        return "share must be a number in (0, 1]"
    limit = data.get("max_sessions")
    if kind == CANARY and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        return "max_sessions must be an integer >= 0"
    salt = data.get("salt")
    if kind == HOLDBACK and (not isinstance(salt, str) or not salt):
        return "a holdback's salt must be a non-empty string"
    directory = data.get("directory")
    if not isinstance(directory, str) or not _under_candidates(directory):
        return f"directory must be a relative path under {CANDIDATES_DIR}/"
    assignments = data.get("assignments")
    if not isinstance(assignments, dict) or any(arm not in (CANDIDATE, BASE) for arm in assignments.values()):
        return f"assignments must map session ids to {CANDIDATE!r} or {BASE!r}"
    return None


def _under_candidates(directory: str) -> bool:
    # Only the loop's own copies: a hand-edited path must not send traffic to an arbitrary directory.
    path = PurePosixPath(directory)
    return (not path.is_absolute() and ".." not in path.parts
            and path.parts[:len(CANDIDATES_DIR.parts)] == CANDIDATES_DIR.parts and path != CANDIDATES_DIR)
