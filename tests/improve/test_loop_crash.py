"""A process killed right after its write is committed (the `apply` or `rollback` line is in the audit log)
but before the loop recorded what follows from it: the next tick finishes the record. An applied edit is
watched (guard, monitor, holdback) rather than left live and unwatched while cycles stack edits on it; a
rollback starts its cooldown rather than letting the next tick start a cycle at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from improve_support import ADD_FIX
from loop_support import Clock, audit_actions, loop

from lousho.improve import audit, proposals
from lousho.improve.cycle import run_cycle
from lousho.improve.faults import FAULT_ENV, TRACE_ENV
from lousho.improve.harness import read_harness
from lousho.improve.state import Paths, load_state
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick


def killed_after_commit(*args: str) -> None:
    """Run ``lousho ARGS`` in a child that SIGKILLs itself just after the writer's commit line."""
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, TRACE_ENV)}
    done = subprocess.run([sys.executable, "-P", "-m", "lousho", *args], capture_output=True, text=True,
                          timeout=300, env={**env, FAULT_ENV: "done"}, cwd=Path(__file__).parent)
    assert done.returncode == -9, done.stderr


def test_an_approve_killed_after_its_write_is_watched_by_the_next_tick(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"approval": "manual"}, clock=clock) as (setup, model, _):
        base = read_harness(setup.agent_dir).revision
        queued = run_cycle(setup)
        assert queued.outcome == "queued", queued.reason
        killed_after_commit("improve", "approve", str(setup.agent_dir), queued.proposal_id, "--check",
                            str(setup.check), "--model-url", model.url, "--model", "agent")
        applied = read_harness(setup.agent_dir).revision
        assert applied == queued.revision and ADD_FIX in (setup.agent_dir / "instructions.md").read_text()
        assert load_state(setup.paths).watched is None  # the kill came before the watch was recorded

        clock.advance(hours=1)
        first = tick(setup, new_owner())

        watched = load_state(setup.paths).watched
        assert watched is not None and watched.status == "monitoring", first
        assert (watched.before, watched.after, watched.proposal) == (base, applied, queued.proposal_id)
        assert proposals.load(setup.paths, queued.proposal_id)["status"] == "applied"
        assert first.action != "cycle", "no cycle may stack a new edit on an unwatched one"
        assert "apply-resumed" in audit_actions(setup.agent_dir)
        assert audit.verify(setup.paths).ok


def test_a_rollback_killed_after_its_write_starts_the_cooldown_on_the_next_tick(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {"invariant": [ADD_FIX]}, clock=clock) as (setup, _, _):
        base = read_harness(setup.agent_dir).revision
        applied = run_cycle(setup)
        assert applied.outcome == "applied", applied.reason
        killed_after_commit("improve", "rollback", str(setup.agent_dir))
        assert read_harness(setup.agent_dir).revision == base
        assert load_state(setup.paths).cooldown_until is None  # the kill came before the cooldown

        clock.advance(hours=1)
        owner = new_owner()
        tick(setup, owner)
        state = load_state(setup.paths)
        assert state.cooldown_until is not None
        assert state.watched is not None and state.watched.status == "rolled-back"
        clock.advance(hours=1)
        again = tick(setup, owner)
        assert again.action == "cycle" and again.cycle is not None and again.cycle.outcome == "refused", again
        assert "cooling down" in again.cycle.reason
        assert read_harness(setup.agent_dir).revision == base
        assert "superseded" not in audit_actions(setup.agent_dir)
        assert audit.verify(Paths(setup.agent_dir)).ok
