"""Per-agent loop state under ``<agent_dir>/.lousho/``: paths, the config file, the state file.

``improve.json`` is the person's configuration (the operations table's defaults unless set);
``state.json`` is the loop's own bookkeeping (daily counters, cooldown, the watched edit). Both are
sorted-key JSON written atomically (a temp file and a rename), so a crash leaves the old or the new
file, never half of one.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from lousho.improve.locks import exclusive
from lousho.kernel.errors import UsageError

Approval = Literal["auto", "manual"]
# Where an applied (or traffic-served) edit stands. Under watch: monitoring (written; the guard and the
# monitor judge it) and traffic (served to a share of sessions, not written yet). Decided: kept,
# kept-unverified (no live verdict in time), rolled-back, superseded (a person changed the harness
# since), retired (the traffic canary found it no better), promote-refused (stale or paused at promote).
WatchStatus = Literal["monitoring", "traffic", "kept", "kept-unverified", "rolled-back", "superseded", "retired",
                      "promote-refused"]
UNDER_WATCH: frozenset[str] = frozenset({"monitoring", "traffic"})


class ConfigInvalid(UsageError):
    code = "LOUSHO_IMPROVE_CONFIG_INVALID"
    hint = "fix .lousho/improve.json: keys are those of docs/improve.md, values of the documented types"


@dataclass(frozen=True)
class LoopConfig:
    """The operations table (seed §4.4) and the modes (§4.2); every default is the seeds'."""

    enabled: bool = True
    approval: Approval = "auto"
    applies_per_day: int = 1  # automatic applies per UTC day
    cycles_per_day: int = 4
    tokens_per_day: int = 2_000_000
    cooldown_hours: float = 24.0  # after a rollback
    editor_calls_per_minute: int = 20  # editor and reflection calls, in a watcher
    interval_seconds: float = 3600.0  # between watcher cycles; the lease lasts two of them
    guard_every_hours: float = 24.0  # the watcher repeats the corpus guard
    monitor_max_age_days: float = 7.0  # then kept-unverified
    traffic_canary: bool = False
    traffic_share: float = 0.25  # at most this share of new sessions on the candidate
    traffic_sessions: int = 50  # and at most this many sessions before a promote
    # While an applied edit is watched, the base revision keeps this share of new sessions (the monitor's
    # concurrent control); 0 turns the holdback off and the watch runs stratified.
    holdback: float = 0.2
    quoted_checks: Literal["reject", "flag"] | None = None  # None: reject in auto mode, flag in manual
    gate: Literal["paired", "seed"] | None = None  # None: the step's (paired unless --gate seed)

    @property
    def quoted_policy(self) -> Literal["reject", "flag"]:
        if self.quoted_checks is not None:
            return self.quoted_checks
        return "reject" if self.approval == "auto" else "flag"

    @property
    def recurring_only(self) -> bool:
        """Auto mode learns only from failures seen in two or more runs; manual mode takes every one."""
        return self.approval == "auto"


@dataclass(frozen=True)
class WatchedEdit:
    """The edit the loop watches: ``before`` -> ``after``, and where it stands (``status``).

    Times are ISO UTC. ``applied_at`` is set once it is written (a traffic candidate has ``started_at``
    instead); ``cited`` are the lessons its editors cited, ``fixed`` the training cases it helped.
    ``design`` is the monitor's design for a written edit (``concurrent``: ``holdback`` of new sessions kept
    on the base; ``stratified``: no holdback), ``design_reason`` why; the watcher updates both when the
    monitor falls back. Unset on an edit watched before the loop recorded them.
    """

    status: WatchStatus
    before: str
    after: str
    proposal: str | None = None
    cited: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    applied_at: str | None = None
    started_at: str | None = None
    reason: str | None = None  # why it left the watch
    decided_at: str | None = None  # kept or kept-unverified
    rolled_back_at: str | None = None
    design: str | None = None
    holdback: float | None = None
    design_reason: str | None = None

    @property
    def under_watch(self) -> bool:
        return self.status in UNDER_WATCH

    def decided(self, status: WatchStatus, reason: str, **times: str) -> WatchedEdit:
        """This edit with a new status, the reason, and the time fields given (decided_at, rolled_back_at)."""
        return replace(self, status=status, reason=reason, **times)

    def to_dict(self) -> dict[str, Any]:
        """As ``state.json`` holds it: unset fields left out."""
        data = {key: value for key, value in asdict(self).items() if value is not None}
        data["cited"], data["fixed"] = list(self.cited), list(self.fixed)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchedEdit:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["cited"] = tuple(values.get("cited") or ())
        values["fixed"] = tuple(values.get("fixed") or ())
        return cls(**values)


@dataclass
class LoopState:
    """What the loop remembers between cycles. ``day`` is the UTC date the counters belong to."""

    day: str = ""
    cycles_today: int = 0
    tokens_today: int = 0
    applies_today: int = 0
    cooldown_until: str | None = None  # ISO UTC
    watched: WatchedEdit | None = None  # the last applied (or traffic-served) edit, watched or decided
    last_guard_at: str | None = None
    last_cycle_at: str | None = None

    def roll_day(self, now: datetime) -> None:
        today = now.astimezone(UTC).date().isoformat()
        if self.day != today:
            self.day, self.cycles_today, self.tokens_today, self.applies_today = today, 0, 0, 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["watched"] = self.watched.to_dict() if self.watched else None
        return data


class Paths:
    """Where everything of one agent directory's loop lives."""

    def __init__(self, agent_dir: Path) -> None:
        self.agent_dir = Path(agent_dir)
        self.root = self.agent_dir / ".lousho"
        self.config = self.root / "improve.json"
        self.stop = self.root / "improve.stop"
        self.audit = self.root / "audit.jsonl"
        self.audit_head = self.root / "audit.head.json"
        self.revisions = self.root / "revisions"
        self.proposals = self.root / "proposals"
        self.lessons = self.root / "lessons.jsonl"
        self.cache = self.root / "cache"
        self.state = self.root / "state.json"
        self.lease = self.root / "watcher.lease"
        self.corpus = self.root / "corpus.json"
        self.traffic = self.root / "traffic.json"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)


_LOCK = threading.Lock()


def load_config(paths: Paths) -> LoopConfig:
    if not paths.config.exists():
        return LoopConfig()
    try:
        data = json.loads(paths.config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigInvalid(f"{paths.config}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigInvalid(f"{paths.config}: expected a JSON object")
    known = {f.name: f for f in fields(LoopConfig)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigInvalid(f"{paths.config}: unknown keys {unknown}", hint=f"known keys: {sorted(known)}")
    defaults = LoopConfig()
    for key, value in data.items():
        expected = type(getattr(defaults, key))
        if key == "quoted_checks":
            ok = value in (None, "reject", "flag")
        elif key == "gate":
            ok = value in (None, "paired", "seed")
        elif key == "approval":
            ok = value in ("auto", "manual")
        elif expected is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        elif expected is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise ConfigInvalid(f"{paths.config}: {key}={value!r} is not a valid {key}")
    config = LoopConfig(**data)
    if not 0 < config.traffic_share <= 0.25:
        raise ConfigInvalid(f"{paths.config}: traffic_share must be in (0, 0.25]")
    if not 0 < config.traffic_sessions <= 50:
        raise ConfigInvalid(f"{paths.config}: traffic_sessions must be in 1..50")
    if config.holdback and not 0.1 <= config.holdback <= 0.25:
        raise ConfigInvalid(f"{paths.config}: holdback must be 0 (off) or in [0.1, 0.25]")
    return config


def load_state(paths: Paths) -> LoopState:
    if not paths.state.exists():
        return LoopState()
    data = json.loads(paths.state.read_text(encoding="utf-8"))
    known = {f.name for f in fields(LoopState)}
    state = LoopState(**{k: v for k, v in data.items() if k in known})
    if isinstance(data.get("watched"), dict):
        state.watched = WatchedEdit.from_dict(data["watched"])
    return state


def update(paths: Paths, change: Callable[[LoopState], None]) -> LoopState:
    """Load the state, let ``change`` modify it, save it, and return it: one read-modify-write under
    ``.lousho/state.lock``, so a watcher, a cycle and a CLI command never lose each other's counts."""
    with exclusive(paths, "state"):
        state = load_state(paths)
        change(state)
        _write_json(paths.state, state.to_dict())
    return state


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    """Atomic sorted-key JSON (for the other loop files: proposals, corpus, traffic)."""
    _write_json(path, data)
