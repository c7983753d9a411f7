"""The loop's brakes (seed §4.4): the kill switch, the daily budgets, the cooldown, the editor rate.

The kill switch is three switches, any of which stops the loop: the file ``.lousho/improve.stop``,
the environment ``LOUSHO_IMPROVE=off``, or ``"enabled": false`` in ``.lousho/improve.json``. The
loop checks it before each cycle and again before the editors, the canary and the write.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lousho.improve.state import LoopConfig, LoopState, Paths, load_config, parse_iso
from lousho.models.protocol import Message, ModelClient, Tool
from lousho.models.result import ChatResult


def kill_switch(paths: Paths, environ: Mapping[str, str]) -> str | None:
    """Why the loop must stop now, or None. Reads the config afresh: a person may flip it any time."""
    if paths.stop.exists():
        return f"{paths.stop} exists"
    if environ.get("LOUSHO_IMPROVE", "").strip().lower() == "off":
        return "LOUSHO_IMPROVE=off"
    if not load_config(paths).enabled:
        return f'"enabled": false in {paths.config}'
    return None


def refusal(config: LoopConfig, state: LoopState, now: datetime) -> str | None:
    """Why a new cycle may not start (budgets, cooldown), or None. ``state`` is rolled to today."""
    state.roll_day(now)
    if state.cooldown_until and now < parse_iso(state.cooldown_until):
        return f"cooling down after a rollback until {state.cooldown_until}"
    if state.cycles_today >= config.cycles_per_day:
        return f"{state.cycles_today} cycles today, the limit is {config.cycles_per_day} a UTC day"
    if state.tokens_today >= config.tokens_per_day:
        return f"{state.tokens_today} tokens spent today, the budget is {config.tokens_per_day} a UTC day"
    return None


@dataclass
class RateLimited:
    """A model client allowing at most ``per_minute`` calls in any 60 s (a watcher's editor and reflection
    calls); a call over the rate waits for its turn rather than failing."""

    inner: ModelClient
    per_minute: int
    clock: object = field(default=time.monotonic, repr=False)
    sleep: object = field(default=time.sleep, repr=False)
    _calls: deque[float] = field(default_factory=deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def complete(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                 temperature: float | None = None, seed: int | None = None,
                 max_tokens: int | None = None) -> ChatResult:
        self.wait()
        return self.inner.complete(messages, tools, temperature=temperature, seed=seed, max_tokens=max_tokens)

    def wait(self) -> float:
        """Block until a call is allowed; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                now = self.clock()  # type: ignore[operator]
                while self._calls and now - self._calls[0] >= 60.0:
                    self._calls.popleft()
                if len(self._calls) < self.per_minute:
                    self._calls.append(now)
                    return waited
                delay = 60.0 - (now - self._calls[0])
            self.sleep(delay)  # type: ignore[operator]
            waited += delay
