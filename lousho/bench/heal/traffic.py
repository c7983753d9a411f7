"""Live traffic: sessions of the agent as a user would send them, exported to the benchmark's daemon.

These are the runs the watcher's monitor and the traffic canary judge. Each session is one bug report
(one run, not a probe), routed by ``lousho.agent.traffic_route.route`` exactly as ``lousho agent run``
routes it (a canary's candidate, or the monitor's holdback keeping the base on a fifth of the sessions after
a write), scored by the hidden tests, with the verdict on the run's root span. What is simulated: the
users (reports drawn at random from a scenario's mix of tasks) and the time between sessions (none).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

from lousho.agent.traffic_route import route
from lousho.bench.heal.bench import Attempt
from lousho.bench.heal.runs import Outcome
from lousho.bench.heal.tasks import BY_ID, TASKS, case
from lousho.improve.loop_setup import LoopSetup
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import Tick, tick

EVERY_TASK = tuple(t.id for t in TASKS)
EASY = tuple(t.id for t in TASKS if not t.hard)
TEXT = tuple(t.id for t in TASKS if t.area == "text")
WATCH_BATCH = 60  # sessions between watcher ticks while the monitor watches an applied edit
# At most this many after an apply: the monitor keeps an edit at its last look, 60 held-back runs, which at the
# default 20% holdback take 300 sessions on average (P(fewer than 60 in 600) < 1e-15).
WATCH_SESSIONS = 600


def sessions(attempt: Attempt, mix: Sequence[str], count: int, *, salt: str = "") -> list[Outcome]:
    """``count`` sessions, each a report drawn from ``mix`` (task ids), then flushed to the daemon."""
    rng = random.Random(f"{attempt.seed}:traffic:{salt}")
    outcomes = []
    for _ in range(count):
        task = BY_ID[rng.choice(list(mix))]
        report = case(task.id)
        session = f"s-{uuid.uuid4().hex[:16]}"
        served = route(attempt.agent_dir, session)
        outcomes.append(attempt.runner.run(served.directory, report.input, case_id=report.id, arm=served.arm,
                                           run_id=session, tracer_provider=attempt.provider(),
                                           record_verdict=True))
    attempt.flush()
    return outcomes


def until_decided(attempt: Attempt, setup: LoopSetup, mix: Sequence[str], *, salt: str) -> tuple[Tick, int]:
    """Live sessions in batches of ``WATCH_BATCH``, a watcher tick after each, until the watched edit is decided
    (or ``WATCH_SESSIONS`` were sent): the last tick and the sessions sent."""
    owner = new_owner()
    sent = 0
    while True:
        sessions(attempt, mix, WATCH_BATCH, salt=f"{salt}-{sent}")
        sent += WATCH_BATCH
        decided = tick(setup, owner)
        if decided.action not in ("monitoring", "guard") or sent >= WATCH_SESSIONS:
            return decided, sent


def text_heavy() -> tuple[str, ...]:
    """Traffic where text helpers dominate (two reports in three), the canary-traffic scenario's mix."""
    return TEXT * 4 + tuple(t for t in EASY if t not in TEXT)
