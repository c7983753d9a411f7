"""The editor cache and the ledger of planned, run and cached calls (Harness² ``cache_dir``).

With ``cache_dir``, an editor (or selector) request whose bytes match a stored one is answered from
the cache; with ``cached_probe`` as well, a probe run with the same harness revision, case input,
repeat number and probe is replayed. A replayed run is old evidence, not new: its record says
``cached`` and the ledger counts it apart. Repeats never collide, because the repeat number is part
of the key: the cache cannot make the gate's fresh runs copies of each other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from lousho.improve.errors import BudgetExceeded
from lousho.improve.records import Case, RunRecord
from lousho.models.protocol import Message, ModelClient, Tool
from lousho.models.result import ChatResult

Kind = Literal["editor", "probe"]


@dataclass
class Tally:
    planned: int = 0
    run: int = 0
    cached: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"planned": self.planned, "run": self.run, "cached": self.cached}


@dataclass
class Ledger:
    """How many model calls (editor, selector) and probe runs the step planned, ran, and replayed."""

    editor: Tally = field(default_factory=Tally)
    probe: Tally = field(default_factory=Tally)
    requests: int = 0  # model requests actually sent: the editors' and every probe run's
    tokens: int = 0
    # A step stops once it has spent more than this: at most one run or call over (the loop's daily budget).
    token_limit: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, kind: Kind, *, cached: bool, requests: int = 0, tokens: int = 0) -> None:
        with self._lock:
            tally = self.editor if kind == "editor" else self.probe
            tally.planned += 1
            if cached:
                tally.cached += 1
            else:
                tally.run += 1
                self.requests += requests
                self.tokens += tokens
            over = self.token_limit is not None and self.tokens > self.token_limit
        if over:
            # Checked after every run and call, so the overshoot is at most this last one.
            raise BudgetExceeded(f"the step spent {self.tokens} tokens, over the {self.token_limit} left in "
                                 f"today's budget (the last {kind} run or call cost {tokens})")

    def to_dict(self) -> dict[str, Any]:
        return {"editor_calls": self.editor.to_dict(), "probe_runs": self.probe.to_dict(),
                "requests": self.requests, "tokens": self.tokens}


class Cache:
    """Files under ``root`` (``editor/<key>.json``, ``probe/<key>.json``); ``root=None`` caches nothing."""

    def __init__(self, root: Path | None, *, probes: bool = False) -> None:
        self.root = root
        self.probes = probes and root is not None

    def get(self, kind: Kind, key: str) -> dict[str, Any] | None:
        if self.root is None:
            return None
        path = self.root / kind / f"{key}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None  # a missing or torn entry is a miss, never an error

    def put(self, kind: Kind, key: str, value: dict[str, Any]) -> None:
        if self.root is None:
            return
        folder = self.root / kind
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(value, sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / f"{key}.json")  # readers see the whole entry or none

    def append_ledger(self, ledger: Ledger, extra: dict[str, Any]) -> None:
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        line = {"at": datetime.now(UTC).isoformat(), **ledger.to_dict(), **extra}
        with (self.root / "ledger.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


@dataclass
class CachedClient:
    """A model client for editor sessions: answers byte-identical requests from the cache, counts the rest."""

    inner: ModelClient
    cache: Cache
    ledger: Ledger
    model: str

    def complete(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                 temperature: float | None = None, seed: int | None = None,
                 max_tokens: int | None = None) -> ChatResult:
        key = digest([self.model, list(messages), list(tools or []), temperature, seed, max_tokens])
        hit = self.cache.get("editor", key)
        if hit is not None:
            self.ledger.count("editor", cached=True)
            return ChatResult.from_dict(hit)
        try:
            result = self.inner.complete(messages, tools, temperature=temperature, seed=seed, max_tokens=max_tokens)
        except BaseException:
            self.ledger.count("editor", cached=False, requests=1)
            raise
        self.ledger.count("editor", cached=False, requests=1, tokens=result.usage.total_tokens)
        stored = result.to_dict()
        stored["raw"] = {}  # the answer is what replays; the provider's envelope is not worth keeping
        self.cache.put("editor", key, stored)
        return result


def cached_run(cache: Cache, ledger: Ledger, probe_id: str, revision: str, case: Case, repeat: int,
               run: Callable[[], RunRecord]) -> RunRecord:
    """One probe run, replayed from the cache when ``cached_probe`` is on and it was run before."""
    key = digest([probe_id, revision, case.id, case.input, repeat])
    if cache.probes:
        hit = cache.get("probe", key)
        if hit is not None:
            ledger.count("probe", cached=True)
            return dataclasses.replace(RunRecord.from_dict(hit), cached=True)
    record = run()
    ledger.count("probe", cached=False, requests=record.requests, tokens=record.tokens)
    if cache.probes and record.status != "cannot-score":  # an unscorable run is not evidence worth keeping
        cache.put("probe", key, record.to_dict())
    return record
