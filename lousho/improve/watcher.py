"""The watcher (``lousho improve DIR --watch``): one tick at a time, under a lease, it watches the
applied edit and runs cycles on a timer.

Each tick, in order: take or renew the lease (another live watcher: do nothing); the kill switch
(stops within one tick); the traffic canary's verdict (promote writes, retire discards); for an
applied edit, the corpus guard when it is due (right after a write that skipped it, then every 24 h)
and the monitor on live runs (rollback, keep, kept-unverified after 7 days); otherwise a cycle when
the interval has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

from lousho.improve import audit, traffic
from lousho.improve.controls import kill_switch
from lousho.improve.cycle import CycleResult, LoopSetup, keep, promote, rollback, run_cycle, run_guard
from lousho.improve.harness import read_harness
from lousho.improve.state import load_config, load_state, parse_iso
from lousho.improve.watch_lease import acquire, new_owner, release

TrafficOutcomes = Callable[[str], tuple[list[bool], list[bool]]]


@dataclass(frozen=True)
class Tick:
    action: str  # idle, leased-elsewhere, paused, guard, rollback, kept, kept-unverified, monitoring, cycle, traffic
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
    stop = kill_switch(paths, setup.environ)
    if stop:
        return Tick("paused", f"kill switch: {stop}")
    state = load_state(paths)
    watched = state.watched or {}
    status = watched.get("status")
    if status == "traffic":
        return _traffic(setup, watched, traffic_outcomes)
    if status == "monitoring":
        current = read_harness(setup.agent_dir).revision
        if current != watched.get("after"):  # a person changed the harness since: this edit is not live
            _set_watched(setup, {**watched, "status": "superseded", "reason": f"the harness is now {current}"})
            audit.append(paths, "superseded", revision=watched.get("after"), found=current)
            return Tick("superseded", f"the watched edit {watched.get('after')} is no longer live ({current} is)")
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


def _monitor(setup: LoopSetup, watched: dict[str, object], *, guarded: bool) -> Tick:
    if not setup.observe:
        config = load_config(setup.paths)
        age = setup.clock() - parse_iso(str(watched["applied_at"]))
        if age >= timedelta(days=config.monitor_max_age_days):
            reason = f"no live runs could be read in {config.monitor_max_age_days:g} days (no --observe)"
            audit.append(setup.paths, "monitor", decision="kept-unverified", reason=reason)
            keep(setup, "kept-unverified", reason)
            return Tick("kept-unverified", reason)
        return Tick("guard" if guarded else "monitoring", "no observe store configured: the monitor cannot read "
                                                           "live runs (pass --observe)")
    from lousho.analysis.live_monitor import Monitor
    from lousho.analysis.monitor import MonitorConfig
    from lousho.observe.client import connect

    config = load_config(setup.paths)
    store = connect(setup.observe, token=setup.observe_token, ca_cert=setup.observe_ca_cert)
    agent = _agent_name(setup)
    monitor = Monitor(store, agent, str(watched["before"]), str(watched["after"]),
                      parse_iso(str(watched["applied_at"])),
                      MonitorConfig(max_age=timedelta(days=config.monitor_max_age_days)))
    decision = monitor.check(setup.clock())
    evidence = {"look": decision.look, "runs": decision.runs, "base_passes": decision.base_passes,
                "applied_passes": decision.applied_passes, "z": decision.z, "false_alarm": decision.false_alarm,
                "power": decision.power}
    if decision.action == "rollback":
        audit.append(setup.paths, "monitor", decision="rollback", reason=decision.reason, **evidence)
        rollback(setup, reason=f"monitor: {decision.reason}")
        return Tick("rollback", f"the monitor saw a regression: {decision.reason}")
    if decision.action in ("keep", "kept-unverified"):
        audit.append(setup.paths, "monitor", decision=decision.action, reason=decision.reason, **evidence)
        outcome = "kept" if decision.action == "keep" else "kept-unverified"
        keep(setup, outcome, decision.reason)
        return Tick(outcome, decision.reason)
    return Tick("monitoring", decision.reason)


def _traffic(setup: LoopSetup, watched: dict[str, object], outcomes: TrafficOutcomes | None) -> Tick:
    paths = setup.paths
    if outcomes is not None:
        decision = traffic.decide(paths, outcomes)
    elif setup.observe:
        from lousho.observe.client import connect

        store = connect(setup.observe, token=setup.observe_token, ca_cert=setup.observe_ca_cert)
        decision = traffic.decide(paths, store=store)
    else:
        return Tick("traffic", "no observe store configured: the traffic canary cannot be judged")
    config = load_config(paths)
    started = parse_iso(str(watched.get("started_at")))
    if decision.action == "continue" and setup.clock() - started >= timedelta(days=config.monitor_max_age_days):
        decision = replace(decision, action="retire", reason=f"not enough scored candidate runs in "
                                                             f"{config.monitor_max_age_days:g} days: {decision.reason}")
    if decision.action == "continue":
        return Tick("traffic", decision.reason)
    stop = kill_switch(paths, setup.environ)
    if stop and decision.action == "promote":  # the canary stays running; the next tick decides again
        return Tick("paused", f"kill switch before the promote: {stop}")
    traffic.finish(paths, decision.action)
    audit.append(paths, f"traffic-{decision.action}", reason=decision.reason, proposal=watched.get("proposal"))
    proposal = str(watched.get("proposal"))
    if decision.action == "retire":
        from lousho.improve.cycle import load_proposal
        from lousho.improve.state import save_state, write_json

        data = load_proposal(paths, proposal)
        data["status"] = "retired"
        write_json(paths.proposals / f"{proposal}.json", data)
        state = load_state(paths)
        state.watched = {**watched, "status": "retired", "reason": decision.reason}
        save_state(paths, state)
        return Tick("traffic", f"retired: {decision.reason}")
    result = promote(setup, proposal)
    if result.outcome not in ("applied", "rolled-back"):  # refused (stale) or paused: stop watching it
        _set_watched(setup, {**watched, "status": "promote-refused", "reason": result.reason})
        return Tick("traffic", f"promote refused: {result.reason}", result)
    return Tick("traffic", f"promoted: {result.outcome}: {result.reason}", result)


def _set_watched(setup: LoopSetup, watched: dict[str, object]) -> None:
    from lousho.improve.state import save_state

    state = load_state(setup.paths)
    state.watched = dict(watched)
    save_state(setup.paths, state)


def _agent_name(setup: LoopSetup) -> str:
    return setup.name
