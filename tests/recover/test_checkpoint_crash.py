"""Crashes by crashing (STYLE §14): a child process SIGKILLs itself at a named point of a step, a fresh process
resumes the run, and an external ledger counts how often each side effect really ran."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from recover_support import run_child, spawned

from lousho.recover import resume
from lousho.recover.store import RunStore

STEPS = 4
KILL_STEP = 2


def _ledger_counts(ledger: Path, run_id: str) -> Counter[int]:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return Counter(int(line.split()[1]) for line in lines if line.split()[0] == run_id)


def _crash_then_resume(store_url: str, tmp_path: Path, kill: str) -> tuple[Path, dict]:
    ledger = tmp_path / "ledger.txt"
    crashed = run_child("run", store_url, "r1", str(ledger), str(STEPS), "--kill", kill, "--kill-step", str(KILL_STEP))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = run_child("run", store_url, "r1", str(ledger), str(STEPS))
    assert resumed.returncode == 0, resumed.stderr
    return ledger, json.loads(resumed.stdout)


def test_step_killed_after_its_side_effect_but_before_its_save_runs_again_and_earlier_steps_do_not(
    store: RunStore, store_url: str, tmp_path: Path,
):
    ledger, result = _crash_then_resume(store_url, tmp_path, "in-fn")
    counts = _ledger_counts(ledger, "r1")
    assert counts == {0: 1, 1: 1, KILL_STEP: 2, 3: 1}  # at least once for the step that died, once for the rest
    assert result["attempts"] == 2
    run = store.get_run("r1")
    assert run is not None and run.status == "finished"
    assert run.output == [{"i": i} for i in range(STEPS)]


def test_kill_inside_the_checkpoint_transaction_records_nothing_of_the_step(
    store: RunStore, store_url: str, tmp_path: Path,
):
    """Output and done marker are one transaction: a kill before COMMIT leaves neither, so the step re-runs."""
    ledger = tmp_path / "ledger.txt"
    crashed = run_child("run", store_url, "r1", str(ledger), str(STEPS), "--kill", "before-commit",
                        "--kill-step", str(KILL_STEP))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert sorted(store.load_steps("r1")) == [0, 1]
    assert [entry.step for entry in store.history("r1")] == [1, 0]
    assert _ledger_counts(ledger, "r1")[KILL_STEP] == 1

    resumed = run_child("run", store_url, "r1", str(ledger), str(STEPS))
    assert resumed.returncode == 0, resumed.stderr
    assert _ledger_counts(ledger, "r1") == {0: 1, 1: 1, KILL_STEP: 2, 3: 1}
    assert sorted(store.load_steps("r1")) == [0, 1, 2, 3]


def test_step_killed_right_after_its_save_commits_is_not_run_again(store: RunStore, store_url: str, tmp_path: Path):
    """An acknowledged checkpoint survives SIGKILL (synchronous=NORMAL in WAL mode is enough for that)."""
    ledger, _ = _crash_then_resume(store_url, tmp_path, "after-commit")
    assert _ledger_counts(ledger, "r1") == {0: 1, 1: 1, KILL_STEP: 1, 3: 1}
    steps = store.load_steps("r1")
    assert steps[KILL_STEP].output == {"i": KILL_STEP}
    assert store.get_run("r1").status == "finished"


def test_two_processes_writing_different_runs_to_one_file_both_succeed(store: RunStore, store_url: str):
    count = 300
    with spawned(*[("write", store_url, f"w{i}", str(count)) for i in range(2)]) as children:
        for child in children:
            _, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
    for i in range(2):
        steps = store.load_steps(f"w{i}")
        assert sorted(steps) == list(range(count))
        assert store.get_run(f"w{i}").status == "finished"
        assert len({s.output["pid"] for s in steps.values()}) == 1


def test_stale_writer_in_another_process_is_fenced_and_except_exception_does_not_swallow_it(
    store: RunStore, store_url: str, tmp_path: Path,
):
    go = tmp_path / "go"
    with spawned(("stale", store_url, "r1", str(go))) as (child,):
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        taken = resume(store, "r1")  # a takeover: epoch 0 -> 1
        assert taken.epoch == 1
        go.touch()
        out, err = child.communicate(timeout=60)
    assert child.returncode == 3, (out, err)
    assert json.loads(out.splitlines()[-1]) == {"lease_lost": "LOUSHO_LEASE_LOST", "epoch": 0, "current": 1}
    assert sorted(store.load_steps("r1")) == [0]  # the stale write left nothing
    assert taken.step("first", lambda: pytest.fail("recorded step ran again")) == 1


def test_approvals_resolve_exactly_once_when_two_processes_race(store: RunStore, store_url: str, tmp_path: Path):
    store.create_run("r1", agent="a", kind="send", input={})
    ids = [store.create_approval("r1", tool_call_id=f"c{i}", tool_name="rm", args={"i": i}).id for i in range(60)]
    go = tmp_path / "go"
    won = []
    with spawned(*[("resolve", store_url, str(go), *ids)] * 2) as children:
        for child in children:  # both interpreters up, store open, polling for the go file
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        go.touch()
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            won.append(json.loads(out)["won"])
    assert sorted(won[0] + won[1]) == sorted(ids)  # each approval won by exactly one process
    assert all(a.status == "approved" for a in store.list_approvals("r1"))
