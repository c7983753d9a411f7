"""The self-healing loop through the scripted model server and real files (seed §4.1–§4.4)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from improve_support import ADD_FIX, HARM, agent_policy
from loop_support import Clock, audit_actions, files, loop

from lousho.improve import audit, lessons, proposals
from lousho.improve.cycle import apply_proposal, force_apply, reject_proposal, rollback, run_cycle
from lousho.improve.harness import read_harness
from lousho.improve.state import Paths, load_state
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick


def test_auto_mode_applies_a_true_fix_after_the_canary_and_guards_it(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}) as (setup, _, _):
        before = read_harness(setup.agent_dir).revision
        result = run_cycle(setup)
        assert result.outcome == "applied", result.reason
        assert ADD_FIX in (setup.agent_dir / "instructions.md").read_text()
        assert [c.name for c in result.checks] == ["canary", "guard"] and all(c.passed for c in result.checks)
        state = load_state(setup.paths)
        assert state.watched.before == before and state.watched.status == "monitoring"
        assert state.applies_today == 1 and state.cycles_today == 1 and state.tokens_today > 0
        assert audit_actions(setup.agent_dir) == ["cycle-start", "canary", "apply-begin", "apply", "holdback-start",
                                                 "guard", "cycle-end"]
        assert audit.verify(setup.paths).ok
        saved = sorted(p.name for p in setup.paths.revisions.iterdir())
        assert saved == sorted([before, result.revision])
        # The next cycle waits for the monitor's verdict on this one.
        assert run_cycle(setup).outcome == "refused"


def test_manual_mode_queues_writes_only_on_approve_and_refuses_a_stale_approve(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"approval": "manual"}) as (setup, _, _):
        untouched = files(setup.agent_dir)
        queued = run_cycle(setup)
        assert queued.outcome == "queued" and queued.proposal_id
        assert files(setup.agent_dir) == untouched, "nothing is written before a person approves"
        approved = apply_proposal(setup, queued.proposal_id, by="person")
        assert approved.outcome == "applied", approved.reason
        assert ADD_FIX in (setup.agent_dir / "instructions.md").read_text()
    with loop(tmp_path / "stale", {"invariant": [ADD_FIX]}, config={"approval": "manual"}) as (setup, _, _):
        queued = run_cycle(setup)
        (setup.agent_dir / "instructions.md").write_text("Someone edited this by hand.\n")
        edited = files(setup.agent_dir)
        stale = apply_proposal(setup, queued.proposal_id, by="person")
        assert stale.outcome == "refused" and "stale" in stale.reason
        assert files(setup.agent_dir) == edited
        assert proposals.load(setup.paths, queued.proposal_id)["status"] == "stale"
        assert "write-refused" in audit_actions(setup.agent_dir)


def test_a_rejected_proposal_writes_nothing(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"approval": "manual"}) as (setup, _, _):
        untouched = files(setup.agent_dir)
        queued = run_cycle(setup)
        assert reject_proposal(setup, queued.proposal_id).outcome == "rejected"
        assert apply_proposal(setup, queued.proposal_id, by="person").outcome == "refused"
        assert files(setup.agent_dir) == untouched


def test_a_harmful_forced_edit_is_rolled_back_to_the_base_bytes_within_two_ticks(tmp_path: Path) -> None:
    protected = [{"id": "add-a", "input": "add 2 3 4"},
                 {"id": "notes", "input": "note: a, b", "protected": True}]
    clock = Clock()
    with loop(tmp_path, {}, cases=protected, clock=clock) as (setup, _, _):
        from lousho.improve import corpus
        from lousho.improve.records import Case

        base_files = files(setup.agent_dir)
        corpus.add(setup.paths, [Case("notes", "note: a, b", protected=True)], "protected", "base")
        base = read_harness(setup.agent_dir)
        harmful = base.with_file("instructions.md", base.files["instructions.md"] + HARM + "\n")
        force_apply(setup, harmful, reason="planted")
        assert files(setup.agent_dir) != base_files
        owner = new_owner()
        ticks = []
        for _ in range(2):
            ticks.append(tick(setup, owner))
            clock.advance(minutes=5)
            if files(setup.agent_dir) == base_files:
                break
        assert files(setup.agent_dir) == base_files, [t.reason for t in ticks]
        assert ticks[-1].action == "rollback" and "regress" in ticks[-1].reason
        state = load_state(setup.paths)
        assert state.cooldown_until is not None and state.watched.status == "rolled-back"
        # The rollback ends the monitor's holdback: every new session gets the restored base.
        assert audit_actions(setup.agent_dir)[-3:] == ["rollback", "holdback-end", "cooldown"]
        assert audit.verify(setup.paths).ok


def test_the_cooldown_after_a_rollback_is_honoured(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {"invariant": [ADD_FIX]}, clock=clock) as (setup, _, editor):
        assert run_cycle(setup).outcome == "applied"
        rollback(setup, reason="by a person")
        asked = len(editor.requests)
        clock.advance(hours=23, minutes=59)
        refused = run_cycle(setup)
        assert refused.outcome == "refused" and "cooling down" in refused.reason
        assert len(editor.requests) == asked
        clock.advance(hours=1)
        assert run_cycle(setup).outcome != "refused"


def test_a_second_cycle_is_refused_by_the_token_budget_with_at_most_one_run_over(tmp_path: Path) -> None:
    budget = 3_000
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"tokens_per_day": budget}) as (setup, model, editor):
        first = run_cycle(setup)
        assert first.outcome == "refused" and "budget" in first.reason.lower()
        spent = load_state(setup.paths).tokens_today
        last = int(re.search(r"run or call cost (\d+)", first.reason).group(1))
        assert budget < spent and spent - last <= budget, (spent, last)  # under budget before the last one
        requests = len(model.requests) + len(editor.requests)
        second = run_cycle(setup)
        assert second.outcome == "refused" and f"budget is {budget}" in second.reason
        assert len(model.requests) + len(editor.requests) == requests, "a refused cycle calls no model"
        assert files(setup.agent_dir)["instructions.md"] == (setup.agent_dir / "instructions.md").read_bytes()


def test_four_cycles_a_day_then_refused(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {}, config={"cycles_per_day": 2}, clock=clock) as (setup, _, _):
        assert [run_cycle(setup).outcome for _ in range(3)] == ["kept-base", "kept-base", "refused"]
        clock.advance(days=1)
        assert run_cycle(setup).outcome == "kept-base"


@pytest.mark.parametrize("where", ["cycle", "editors", "canary", "write"])
def test_the_kill_switch_stops_the_cycle_at_each_checkpoint(tmp_path: Path, where: str) -> None:
    # The switch is flipped at the moment named: by the test before the cycle, or by the scripted models
    # while the cycle runs (the agent's model during the first runs; the editor as it finishes; the
    # agent's model on the canary's last run, after 6 probe, 9 gate and 12 canary runs of the fix).
    stop_file: list[Path] = []
    fix_runs = [0]

    def agent(request):  # type: ignore[no-untyped-def]
        first_request = len(request.messages) == 2
        if where == "editors" and first_request:
            stop_file[0].touch()
        if where == "write" and first_request and ADD_FIX in request.system:
            fix_runs[0] += 1
            if fix_runs[0] == 6 + 9 + 12:
                stop_file[0].touch()
        return agent_policy(request)

    def editor(role: str, user: str) -> list[str]:
        if where == "canary":
            stop_file[0].touch()
        return [ADD_FIX]

    with loop(tmp_path, {"invariant": editor}, agent_script=agent) as (setup, model, editors):
        stop_file.append(setup.paths.stop)
        setup.paths.ensure()
        untouched = files(setup.agent_dir)
        if where == "cycle":
            setup.paths.stop.touch()
        result = run_cycle(setup)
        assert result.outcome == "paused", result.reason
        assert files(setup.agent_dir) == untouched
        actions = audit_actions(setup.agent_dir) if setup.paths.audit.exists() else []
        assert "apply" not in actions
        if where == "cycle":
            assert model.requests == [] and editors.requests == []
        if where == "editors":
            assert editors.requests == []
        if where == "canary":
            assert "canary" not in actions and "before the canary" in result.reason
        if where == "write":
            assert "canary" in actions and "before the write" in result.reason


@pytest.mark.parametrize("switch", ["env", "config"])
def test_the_other_kill_switches(tmp_path: Path, switch: str) -> None:
    config = {"enabled": False} if switch == "config" else None
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config=config) as (setup, model, _):
        if switch == "env":
            from dataclasses import replace

            setup = replace(setup, environ={"LOUSHO_IMPROVE": "off"})
        result = run_cycle(setup)
        assert result.outcome == "paused" and model.requests == []


def test_two_watchers_on_one_directory_only_one_works(tmp_path: Path) -> None:
    with loop(tmp_path, {}) as (setup, _, _):
        owners = [new_owner(), new_owner()]
        results: dict[str, str] = {}
        barrier = threading.Barrier(2)

        def run(owner: str) -> None:
            barrier.wait()
            results[owner] = tick(setup, owner).action

        threads = [threading.Thread(target=run, args=(o,)) for o in owners]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == ["cycle", "leased-elsewhere"]
        # The lease lasts two intervals: a second tick of the loser still finds it held.
        loser = next(o for o, a in results.items() if a == "leased-elsewhere")
        assert tick(setup, loser).action == "leased-elsewhere"


def test_a_lease_that_lapses_passes_to_another_watcher(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {}, config={"interval_seconds": 60}, clock=clock) as (setup, _, _):
        first, second = new_owner(), new_owner()
        assert tick(setup, first).action == "cycle"
        assert tick(setup, second).action == "leased-elsewhere"
        clock.advance(seconds=121)
        assert tick(setup, second).action != "leased-elsewhere"


def test_a_lesson_retires_after_its_votes(tmp_path: Path) -> None:
    clock = Clock()
    with loop(tmp_path, {}, clock=clock) as (setup, _, _):
        Paths(setup.agent_dir).ensure()
        lesson = lessons.add(setup.paths, "Prefer rules that say which tool to use.", cycle="c0", failed_checks=[])
        assert not isinstance(lesson, str)

    def citing(role: str, user: str) -> list[str]:
        assert "lesson 1" in user and "Prefer rules that say which tool to use." in user
        return [ADD_FIX]

    plans = {"invariant": citing}
    # The editor's summary cites lesson 1; the edit is applied, then rolled back: a hurt vote.
    from improve_support import editor_script

    script = editor_script(plans)

    def cites(request):  # type: ignore[no-untyped-def]
        reply = script(request)
        return reply + " (lesson 1)" if isinstance(reply, str) and reply.startswith("Added") else reply

    from lousho.models.config import ModelConfig
    from lousho.models.scripted import ScriptedModelServer

    for attempt in range(2):
        with ScriptedModelServer(cites) as editor:
            from dataclasses import replace

            with ScriptedModelServer(agent_policy) as model:
                live = replace(setup, options=replace(setup.options, model=ModelConfig(model.url, "agent"),
                                                      editor_model=ModelConfig(editor.url, "editor")))
                (setup.agent_dir / "instructions.md").write_text("You are a careful bookkeeping assistant.\n")
                from lousho.improve.state import LoopState, update

                def forget(state: LoopState) -> None:
                    state.watched = None

                update(setup.paths, forget)
                result = run_cycle(live)
                assert result.outcome == "applied", result.reason
                assert load_state(setup.paths).watched.cited == (lesson.id,)
                rollback(live, reason="by a person")
                clock.advance(days=1, hours=1)
        current = {le.id: le for le in lessons.load(setup.paths)}[lesson.id]
        assert current.hurt == attempt + 1
        assert current.retired is (attempt == 1)
    assert lessons.active(setup.paths) == []


def test_the_audit_cli_verifies_a_real_loop_log_and_catches_an_edit(tmp_path: Path) -> None:
    import subprocess
    import sys

    with loop(tmp_path, {"invariant": [ADD_FIX]}) as (setup, _, _):
        run_cycle(setup)
        ok = subprocess.run([sys.executable, "-m", "lousho", "improve", "audit", str(setup.agent_dir), "--verify"],
                            capture_output=True, text=True)
        assert ok.returncode == 0 and "ok" in ok.stdout
        lines = setup.paths.audit.read_text().splitlines()
        entry = json.loads(lines[2])
        entry["after"] = "0" * 16
        lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
        setup.paths.audit.write_text("\n".join(lines) + "\n")
        bad = subprocess.run([sys.executable, "-m", "lousho", "improve", "audit", str(setup.agent_dir), "--verify"],
                             capture_output=True, text=True)
        assert bad.returncode == 1 and "line 3" in bad.stdout
