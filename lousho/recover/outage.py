"""The provider-outage breaker, as the recover loop sees it (seed 000 "Provider outages").

The state is the store's (``RunStore.record_outcome``, ``reserve_probe``...), shared by every replica; this module
holds what is per loop: which stored errors count, and the ``on_outage`` calls.

- What counts (``counts``): ``is_provider_failure`` of the stored last error: rate limits, timeouts and network
  failures, retryable unknowns (5xx). Never a bad key (``auth-failure`` is not retryable), a refused request, or
  an error of the run's own code.
- ``on_outage(True)`` when this loop first sees a pause it had not seen, ``on_outage(False)`` when it sees it
  over: once per transition per loop (recovery-anchors §9.5). Each replica reports what it observes, so a
  process that pauses its own work on ``on_outage`` hears about every outage, wherever it was detected; a replica
  that never looked while the breaker was open reports nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lousho.kernel.outage_rule import THRESHOLD
from lousho.recover.records import OutageState

__all__ = ["THRESHOLD", "OutageWatch", "counts"]


def counts(error: dict[str, Any] | None) -> bool:
    """Does this stored ``last_error`` count towards an outage?"""
    if not error:
        return False
    # Imported here: lousho.models' package loads the HTTP client, which `lousho runs pending` need not pay for.
    from lousho.models.errors import is_provider_failure

    return is_provider_failure(error.get("category"), bool(error.get("retryable", True)))


class OutageWatch:
    """Turns the stored breaker state into ``on_outage`` calls, one per transition this loop observes."""

    def __init__(self, notify: Callable[[bool], None]) -> None:
        self._notify = notify
        self._seen: str | None = None  # paused_since of the pause last reported, None when none is

    @property
    def paused(self) -> bool:
        return self._seen is not None

    def observe(self, state: OutageState) -> None:
        if state.paused_since == self._seen:
            return
        was, self._seen = self._seen, state.paused_since
        if was is not None:
            self._notify(False)  # over (if a new pause began since, it is reported next)
        if state.paused_since is not None:
            self._notify(True)
