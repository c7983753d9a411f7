"""The loop where it could get stuck or act on stale state: found in review, kept as tests."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from improve_support import ADD_FIX
from loop_support import Clock, audit_actions, files, loop

from lousho.improve.cycle import run_cycle
from lousho.improve.state import load_state
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick, watch


def test_a_harness_edited_while_the_editors_work_is_never_overwritten(tmp_path: Path) -> None:
    edited = "A person rewrote this while the cycle ran.\n"
    holder: list[Path] = []

    def editing(role: str, user: str) -> list[str]:
        holder[0].write_text(edited)
        return [ADD_FIX]

    with loop(tmp_path, {"invariant": editing}) as (setup, _, _):
        holder.append(setup.agent_dir / "instructions.md")
        result = run_cycle(setup)
        assert result.outcome == "refused" and "stale" in result.reason
        assert (setup.agent_dir / "instructions.md").read_text() == edited
        assert "write-refused" in audit_actions(setup.agent_dir) and "apply" not in audit_actions(setup.agent_dir)


def test_the_canary_stops_once_over_the_budget_and_the_next_cycle_is_refused(tmp_path: Path) -> None:
    with loop(tmp_path / "measure", {"invariant": [ADD_FIX]}) as (setup, _, _):
        step_tokens = run_cycle(setup).step.cost.tokens
    budget = step_tokens + 800  # the step fits; the canary's 12+ runs do not
    with loop(tmp_path / "run", {"invariant": [ADD_FIX]}, config={"tokens_per_day": budget}) as (setup, model, _):
        first = run_cycle(setup)
        assert first.outcome == "refused" and "budget" in first.reason, first.reason
        spent = load_state(setup.paths).tokens_today
        last = int(re.search(r"run or call cost (\d+)", first.reason).group(1))
        assert budget < spent and spent - last <= budget, (spent, last, budget)
        assert "apply" not in audit_actions(setup.agent_dir)
        asked = len(model.requests)
        second = run_cycle(setup)
        assert second.outcome == "refused" and "budget" in second.reason
        assert len(model.requests) == asked


def test_without_an_observe_store_an_edit_is_kept_unverified_after_seven_days(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {"invariant": [ADD_FIX]}, clock=clock) as (setup, _, _):
        assert run_cycle(setup).outcome == "applied"
        owner = new_owner()
        clock.advance(days=6)
        assert tick(setup, owner).action in ("guard", "monitoring")
        clock.advance(days=1, minutes=1)
        assert tick(setup, owner).action == "kept-unverified"
        assert load_state(setup.paths).watched.status == "kept-unverified"
        clock.advance(hours=2)
        assert tick(setup, owner).action == "cycle", "the loop goes on after the verdict"


def test_a_refused_promote_does_not_leave_the_loop_stuck(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"traffic_canary": True}, clock=clock) as (setup, _, _):
        assert run_cycle(setup).outcome == "traffic"
        (setup.agent_dir / "instructions.md").write_text("A person changed the harness meanwhile.\n")
        edited = files(setup.agent_dir)
        result = tick(setup, new_owner(), traffic_outcomes=lambda rev: ([True] * 50, [True] * 150))
        assert "promote refused" in result.reason and "stale" in result.reason
        assert files(setup.agent_dir) == edited
        assert load_state(setup.paths).watched.status == "promote-refused"
        clock.advance(hours=2)
        assert run_cycle(setup).outcome != "refused"


def test_the_kill_switch_holds_a_promote(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"traffic_canary": True}) as (setup, _, _):
        assert run_cycle(setup).outcome == "traffic"
        untouched = files(setup.agent_dir)
        owner = new_owner()
        switched = replace(setup, environ={"LOUSHO_IMPROVE": "off"})
        assert tick(switched, owner, traffic_outcomes=lambda rev: ([True] * 50, [True] * 150)).action == "paused"
        assert files(setup.agent_dir) == untouched
        assert load_state(setup.paths).watched.status == "traffic"
        promoted = tick(setup, owner, traffic_outcomes=lambda rev: ([True] * 50, [True] * 150))
        assert promoted.reason.startswith("promoted")


def test_a_failing_tick_does_not_end_the_watcher(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}) as (setup, _, _):
        assert run_cycle(setup).outcome == "applied"
        seen: list[str] = []
        unreachable = replace(setup, options=replace(setup.options, observe="http://127.0.0.1:9"))  # daemon down
        watch(unreachable, ticks=2, interval=0.01, on_tick=lambda t: seen.append(t.action))
        assert seen == ["error", "error"], seen


def test_the_lease_lasts_two_of_the_watchers_own_intervals(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {}, clock=clock) as (setup, _, _):
        first, second = new_owner(), new_owner()
        tick(setup, first, interval=600)
        lease = json.loads(setup.paths.lease.read_text())
        assert lease["owner"] == first
        clock.advance(seconds=1100)
        assert tick(setup, second, interval=600).action == "leased-elsewhere"
        clock.advance(seconds=101)
        assert tick(setup, second, interval=600).action != "leased-elsewhere"
