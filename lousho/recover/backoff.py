"""How long a failed run waits before the recover loop tries it again, and how long between outage probes.

Seed 000 "Recover a run now", Backoff: the wait doubles with each failed attempt in a row, up to 15 minutes; the
brief fixes the base as ``interval x 2^failures`` (so with the default 30 s interval the first wait is 60 s and
ten failures take about 80 minutes before quarantine, recovery-anchors §8). Jitter (Celery, LangGraph, anchors
§9.3) keeps replicas and runs that failed together from retrying in lockstep.

Invariant: jitter only lengthens a wait, by at most ``JITTER`` of it, so a run is never tried before the rule's
time, and a wait is never more than ``CAP_SECONDS x (1 + JITTER)``, unless the provider asked for longer:
``not_before`` moves a time to the provider's ``Retry-After`` (STYLE 8: retry only when the provider said it may
be), never earlier.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

CAP_SECONDS = 15 * 60.0  # seed 000: "up to 15 minutes"
JITTER = 0.1  # a wait grows by a uniform 0-10%


def base_delay(failures: int, interval: float, cap: float = CAP_SECONDS) -> float:
    """``interval x 2^failures`` seconds, capped: the wait the rule asks for, before jitter."""
    if failures < 0:
        raise ValueError(f"failures must be >= 0, not {failures}")
    # 2**failures overflows a float past ~1,000 failures; the cap is reached long before (2^5 x 30 s > 15 min).
    return min(interval * 2.0 ** min(failures, 64), cap)


def delay(failures: int, interval: float, rng: random.Random, cap: float = CAP_SECONDS) -> float:
    """The wait after ``failures`` failures in a row: the base delay plus up to ``JITTER`` of it."""
    base = base_delay(failures, interval, cap)
    return base * (1.0 + JITTER * rng.random())


def next_attempt(now: datetime, failures: int, interval: float, rng: random.Random,
                 cap: float = CAP_SECONDS) -> datetime:
    """When a run that has just failed ``failures`` times in a row may be tried again."""
    return now + timedelta(seconds=delay(failures, interval, rng, cap))


def not_before(when: datetime, now: datetime, retry_after: float | None) -> datetime:
    """``when``, or ``now + retry_after`` if that is later: the provider's ``Retry-After`` is a floor."""
    if retry_after is None:
        return when
    return max(when, now + timedelta(seconds=retry_after))


def next_probe(now: datetime, failed_probes: int, interval: float, rng: random.Random,
               cap: float = CAP_SECONDS) -> datetime:
    """When the next outage probe may start after ``failed_probes`` failed probes: the first one ``interval``
    after the pause, then doubling (the Arrow breaker's growing reset timeout, anchors §4), capped alike."""
    return next_attempt(now, failed_probes, interval, rng, cap)
