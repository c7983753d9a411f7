"""The monitor fed from the store: real runs only, planned looks only, and its four decisions."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from agent_runs import emit_run

from lousho.analysis import Monitor
from lousho.analysis.monitor import MonitorConfig
from lousho.observe import connect, instrument

# 60 base runs at 0.9 (every tenth fails), then an edit.
BASE = ["fail" if i % 10 == 9 else "pass" for i in range(60)]


def _fill(url: str, agent: str, applied: list[str], probes: int = 0) -> datetime:
    provider = instrument(f"monitor-{agent}", url)
    for i, outcome in enumerate(BASE):
        emit_run(provider, f"{agent}-base-{i}", agent=agent, revision="base", outcome=outcome)
    provider.force_flush()
    time.sleep(0.01)
    applied_at = datetime.now(UTC)
    time.sleep(0.01)
    for i in range(probes):  # the loop's own probes on the applied revision: all pass, must not count
        emit_run(provider, f"{agent}-probe-{i}", agent=agent, revision="applied", outcome="pass", probe=True)
    for i, outcome in enumerate(applied):
        emit_run(provider, f"{agent}-applied-{i}", agent=agent, revision="applied", outcome=outcome)
        if i % 7 == 0:
            emit_run(provider, f"{agent}-unscored-{i}", agent=agent, revision="applied", outcome="unscored")
    provider.shutdown()
    return applied_at


def _monitor(url: str, agent: str, applied_at: datetime) -> Monitor:
    return Monitor(connect(url), agent, "base", "applied", applied_at)


@pytest.mark.system
def test_a_real_regression_is_rolled_back_at_a_planned_look_despite_passing_probes(shared_daemon):
    # Applied at 0.5: 10 of the first 20 fail. 60 passing probes would hide it if they counted.
    applied = ["fail" if i % 2 else "pass" for i in range(20)]
    applied_at = _fill(shared_daemon.url, "regressed", applied, probes=60)
    decision = _monitor(shared_daemon.url, "regressed", applied_at).check()
    assert decision.action == "rollback"
    assert (decision.look, decision.runs, decision.base_passes, decision.applied_passes) == (1, 20, 18, 10)
    assert decision.z >= 2.1 and decision.drop > 0.05
    assert 0 < decision.false_alarm < 0.05 and decision.power > decision.false_alarm


@pytest.mark.system
def test_decisions_wait_for_planned_looks(shared_daemon):
    applied = ["pass"] * 19  # one run short of the first look
    applied_at = _fill(shared_daemon.url, "waiting", applied)
    monitor = _monitor(shared_daemon.url, "waiting", applied_at)
    assert monitor.check().action == "continue"
    assert monitor.check().look is None
    # Seven days on, still short of the last look: kept, but unverified.
    assert monitor.check(now=applied_at + timedelta(days=7, seconds=1)).action == "kept-unverified"


@pytest.mark.system
def test_a_healthy_edit_is_kept_after_the_last_look(shared_daemon):
    applied = ["fail" if i % 10 == 9 else "pass" for i in range(60)]
    applied_at = _fill(shared_daemon.url, "healthy", applied)
    monitor = _monitor(shared_daemon.url, "healthy", applied_at)
    decision = monitor.check()
    assert decision.action == "keep"
    assert (decision.look, decision.runs) == (3, 60)


@pytest.mark.system
def test_crashed_runs_are_failures_against_the_held_back_sessions(shared_daemon):
    # After the apply, every third session stays on the base (the holdback); a third of the edit's runs crash
    # (an error, no verdict). The seed design never sees a crash; the concurrent design counts each a failure.
    agent = "crashing"
    provider = instrument(f"monitor-{agent}", shared_daemon.url)
    for i, outcome in enumerate(BASE):
        emit_run(provider, f"{agent}-before-{i}", agent=agent, revision="base", outcome=outcome)
    provider.force_flush()
    time.sleep(0.01)
    applied_at = datetime.now(UTC)
    time.sleep(0.01)
    for i in range(60):
        if i % 3 == 0:
            emit_run(provider, f"{agent}-held-{i}", agent=agent, revision="base", outcome="pass")
        else:
            emit_run(provider, f"{agent}-applied-{i}", agent=agent, revision="applied",
                     outcome="error" if i % 3 == 1 else "pass")
    provider.shutdown()
    decision = _monitor(shared_daemon.url, agent, applied_at).check()
    assert decision.design == "concurrent" and decision.action == "rollback"
    assert (decision.look, decision.runs, decision.base_passes) == (1, 20, 20)
    # Every applied run up to the 20th held-back one: 38, of which 19 crashed and count as failures.
    assert decision.applied_passes == 19 and decision.applied_runs == 38
    seed = Monitor(connect(shared_daemon.url), agent, "base", "applied", applied_at,
                   MonitorConfig(design="seed")).check()
    assert seed.action != "rollback" and seed.design == "seed"


@pytest.mark.system
def test_without_a_holdback_the_watch_runs_stratified_and_says_so(shared_daemon):
    applied = ["fail" if i % 2 else "pass" for i in range(20)]
    applied_at = _fill(shared_daemon.url, "no-holdback", applied)
    decision = _monitor(shared_daemon.url, "no-holdback", applied_at).check()
    assert decision.design == "stratified" and "[stratified design]" in decision.reason


@pytest.mark.system
def test_the_stratified_watch_leaves_out_a_provider_outage_it_finds_in_the_runs(shared_daemon):
    # No holdback. Right after the apply the provider is down for 12 runs (rate limits, no verdict), then the
    # edit passes as often as the base did. Read as failures, the outage alone would roll the edit back.
    agent = "outage"
    provider = instrument(f"monitor-{agent}", shared_daemon.url)
    for i, outcome in enumerate(BASE):
        emit_run(provider, f"{agent}-base-{i}", agent=agent, revision="base", outcome=outcome)
    provider.force_flush()
    time.sleep(0.01)
    applied_at = datetime.now(UTC)
    time.sleep(0.01)
    for i in range(12):
        emit_run(provider, f"{agent}-down-{i}", agent=agent, revision="applied", outcome="error")
    for i, outcome in enumerate(BASE[:20]):
        emit_run(provider, f"{agent}-applied-{i}", agent=agent, revision="applied", outcome=outcome)
    provider.shutdown()
    decision = _monitor(shared_daemon.url, agent, applied_at).check()
    assert decision.design == "stratified" and decision.outage_runs == 12
    assert decision.action == "continue" and (decision.look, decision.applied_passes) == (1, 18)
    blind = Monitor(connect(shared_daemon.url), agent, "base", "applied", applied_at, detect_outages=False).check()
    assert blind.action == "rollback" and blind.outage_runs == 0
