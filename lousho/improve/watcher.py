"""The watcher (``lousho improve DIR --watch``): one tick at a time, under a lease, it watches the
applied edit and runs cycles on a timer.

Each tick, in order: take or renew the lease (another live watcher: do nothing); end a holdback no
watched edit accounts for; the kill switch (stops within one tick); the traffic canary's verdict
(promote writes, retire discards); for an applied edit, the corpus guard when it is due (right after a
write that skipped it, then every 24 h) and the monitor on live runs (rollback, keep, kept-unverified
after 7 days) in the design the watch records (``concurrent`` against the held-back sessions, else
``stratified``); otherwise a cycle when the interval has passed.

The watcher decides; ``cycle`` carries each decision out (the guard, a rollback, a keep, a promote or
a retire), so every change to the harness, the state and the proposals is made in one place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from lousho.improve import journal, traffic
from lousho.improve.controls import kill_switch
from lousho.improve.cycle import (
    end_orphan_holdback,
    fall_back,
    finish_traffic,
    resume_recording,
    rollback,
    run_cycle,
    run_guard,
    settle,
    supersede,
)
from lousho.improve.harness import read_harness
from lousho.improve.loop_setup import CycleResult, LoopSetup
from lousho.improve.state import WatchedEdit, load_config, load_state, parse_iso
from lousho.improve.watch_lease import acquire, new_owner, release

TrafficOutcomes = Callable[[str], tuple[list[bool], list[bool]]]
TickAction = Literal["idle", "leased-elsewhere", "paused", "guard", "rollback", "kept", "kept-unverified",
                     "monitoring", "superseded", "cycle", "traffic", "error"]


@dataclass(frozen=True)
class Tick:
    action: TickAction
    reason: str
    cycle: CycleResult | None = None


def tick(setup: LoopSetup, owner: str, *, traffic_outcomes: TrafficOutcomes | None = None,
         interval: float | None = None) -> Tick:
    """One tick. ``interval``: the seconds between this watcher's ticks (the lease lasts two of them)."""
    paths = setup.paths
    paths.ensure()
    config = load_config(paths)
    now = setup.clock()
    held, lease = acquire(paths, owner, interval if interval is not None else config.interval_seconds, now)
    if not held:
        return Tick("leased-elsewhere", f"the watcher {lease.owner if lease else '?'} holds the lease")
    journal.recover(paths)  # an apply a crash cut short (this watcher's own, before a restart) is undone first
    resume_recording(setup)  # a committed write whose watch or cooldown a crash cut short is recorded
    end_orphan_holdback(setup)
    stop = kill_switch(paths, setup.environ)
    if stop:
        return Tick("paused", f"kill switch: {stop}")
    state = load_state(paths)
    watched = state.watched
    if watched is not None and watched.status == "traffic":
        return _traffic(setup, watched, traffic_outcomes)
    if watched is not None and watched.status == "monitoring":
        current = read_harness(setup.agent_dir).revision
        if current != watched.after:  # a person changed the harness since: this edit is not live
            supersede(setup, current)
            return Tick("superseded", f"the watched edit {watched.after} is no longer live ({current} is)")
        due = state.last_guard_at is None or now - parse_iso(state.last_guard_at) >= timedelta(
            hours=config.guard_every_hours)
        if due:
            guard, _ = run_guard(setup)
            if not guard.passed:
                rollback(setup, reason=f"corpus guard: {guard.reason}")
                return Tick("rollback", f"the corpus guard found a regression: {guard.reason}")
        return _monitor(setup, watched, guarded=due)
    if state.last_cycle_at is None or now - parse_iso(state.last_cycle_at) >= timedelta(
            seconds=config.interval_seconds):
        result = run_cycle(setup)
        return Tick("cycle", f"{result.outcome}: {result.reason}", result)
    return Tick("idle", "no edit under watch and the next cycle is not due")


def watch(setup: LoopSetup, *, ticks: int | None = None, interval: float | None = None,
          on_tick: Callable[[Tick], None] | None = None) -> None:
    """Tick every ``interval`` seconds (the config's by default) until ``ticks`` ran or Ctrl-C. A tick that
    fails (the daemon unreachable, a model down) is reported and the watcher goes on: it is what rolls back."""
    owner = new_owner()
    paths = setup.paths
    count = 0
    try:
        while ticks is None or count < ticks:
            try:
                result = tick(setup, owner, interval=interval)
            except Exception as e:  # deliberate: one bad tick must not end the only thing that rolls back
                result = Tick("error", f"{type(e).__name__}: {getattr(e, 'message', e)}")
            if on_tick is not None:
                on_tick(result)
            count += 1
            if ticks is not None and count >= ticks:
                break
            time.sleep(interval if interval is not None else load_config(paths).interval_seconds)
    finally:
        release(paths, owner)


def _monitor(setup: LoopSetup, watched: WatchedEdit, *, guarded: bool) -> Tick:
    config = load_config(setup.paths)
    applied_at = parse_iso(str(watched.applied_at))
    options = setup.options
    if not options.observe:
        if setup.clock() - applied_at >= timedelta(days=config.monitor_max_age_days):
            reason = f"no live runs could be read in {config.monitor_max_age_days:g} days (no --observe)"
            settle(setup, "kept-unverified", reason)
            return Tick("kept-unverified", reason)
        return Tick("guard" if guarded else "monitoring", "no observe store configured: the monitor cannot read "
                                                           "live runs (pass --observe)")
    from lousho.analysis.live_monitor import Monitor
    from lousho.analysis.monitor import HOLDBACK, MonitorConfig
    from lousho.observe.client.store_client import connect

    store = connect(str(options.observe), token=options.observe_token, ca_cert=options.observe_ca_cert)
    # The design the watch records (an edit watched before the loop recorded one: concurrent when base runs
    # come, else stratified, as the monitor decides on its own); the holdback share states the rates.
    recorded = MonitorConfig(max_age=timedelta(days=config.monitor_max_age_days),
                             design=watched.design or "concurrent", holdback=watched.holdback or HOLDBACK)
    monitor = Monitor(store, setup.name, watched.before, watched.after, applied_at, recorded,
                      holdback=watched.holdback is not None)
    decision = monitor.check(setup.clock())
    if watched.design is not None and decision.design != watched.design:
        fall_back(setup, decision.design, decision.design_note)
    evidence = {"look": decision.look, "runs": decision.runs, "base_passes": decision.base_passes,
                "applied_passes": decision.applied_passes, "applied_runs": decision.applied_runs, "z": decision.z,
                "false_alarm": decision.false_alarm, "power": decision.power, "design": decision.design,
                "assumptions": decision.assumptions, "outage_runs": decision.outage_runs,
                "outage_windows": [list(w) for w in decision.outage_windows]}
    if decision.action == "rollback":
        settle(setup, "rollback", decision.reason, evidence)
        return Tick("rollback", f"the monitor saw a regression: {decision.reason}")
    if decision.action in ("keep", "kept-unverified"):
        settle(setup, decision.action, decision.reason, evidence)
        return Tick("kept" if decision.action == "keep" else "kept-unverified", decision.reason)
    return Tick("monitoring", decision.reason + (f" ({decision.design_note})" if decision.design_note else ""))


def _traffic(setup: LoopSetup, watched: WatchedEdit, outcomes: TrafficOutcomes | None) -> Tick:
    paths = setup.paths
    options = setup.options
    if outcomes is not None:
        decision = traffic.decide(paths, outcomes)
    elif options.observe:
        from lousho.observe.client.store_client import connect

        store = connect(str(options.observe), token=options.observe_token, ca_cert=options.observe_ca_cert)
        decision = traffic.decide(paths, store=store)
    else:
        return Tick("traffic", "no observe store configured: the traffic canary cannot be judged")
    config = load_config(paths)
    started = parse_iso(str(watched.started_at))
    if decision.action == "continue" and setup.clock() - started >= timedelta(days=config.monitor_max_age_days):
        decision = replace(decision, action="retire", reason=f"not enough scored candidate runs in "
                                                             f"{config.monitor_max_age_days:g} days: {decision.reason}")
    if decision.action == "continue":
        return Tick("traffic", decision.reason)
    stop = kill_switch(paths, setup.environ)
    if stop and decision.action == "promote":  # the canary stays running; the next tick decides again
        return Tick("paused", f"kill switch before the promote: {stop}")
    result = finish_traffic(setup, watched, decision.action, decision.reason)
    if decision.action == "retire":
        return Tick("traffic", f"retired: {decision.reason}")
    if result.outcome not in ("applied", "rolled-back"):
        return Tick("traffic", f"promote refused: {result.reason}", result)
    return Tick("traffic", f"promoted: {result.outcome}: {result.reason}", result)
