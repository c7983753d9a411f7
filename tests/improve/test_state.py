"""state: the loop's state file, its typed watched edit, and read-modify-write updates under one lock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from lousho.improve.state import LoopState, Paths, WatchedEdit, WatchStatus, load_state, update

WORKER = """
import sys
from pathlib import Path
from lousho.improve.state import Paths, update

def add(state):
    state.tokens_today += 1

for _ in range(int(sys.argv[2])):
    update(Paths(Path(sys.argv[1])), add)
"""


@pytest.mark.slow
@pytest.mark.system
def test_concurrent_updates_from_processes_lose_no_count(tmp_path: Path) -> None:
    processes, each = 4, 60
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(each)]) for _ in range(processes)]
    assert [w.wait(timeout=120) for w in workers] == [0] * processes
    assert load_state(Paths(tmp_path)).tokens_today == processes * each


def test_the_watched_edit_has_the_eight_statuses_and_round_trips_the_files_shape(tmp_path: Path) -> None:
    assert set(get_args(WatchStatus)) == {"monitoring", "traffic", "kept", "kept-unverified", "rolled-back",
                                          "superseded", "retired", "promote-refused"}
    paths = Paths(tmp_path)
    paths.ensure()
    # As the loop has always written it: only the fields set, lists for the lessons and the cases.
    on_disk = {"status": "rolled-back", "proposal": "p-1", "before": "rev-a", "after": "rev-b",
               "applied_at": "2026-11-02T09:00:00+00:00", "cited": ["l-1"], "fixed": ["case-1"],
               "rolled_back_at": "2026-11-02T10:00:00+00:00", "reason": "corpus guard: it broke"}
    paths.state.write_text(json.dumps({"day": "2026-11-02", "tokens_today": 7, "watched": on_disk}))
    state = load_state(paths)
    assert state.watched == WatchedEdit("rolled-back", "rev-a", "rev-b", "p-1", ("l-1",), ("case-1",),
                                        applied_at="2026-11-02T09:00:00+00:00", reason="corpus guard: it broke",
                                        rolled_back_at="2026-11-02T10:00:00+00:00")
    assert not state.watched.under_watch

    def touch(s: LoopState) -> None:
        s.cycles_today += 1

    update(paths, touch)
    saved = json.loads(paths.state.read_text())
    assert saved["watched"] == on_disk and saved["tokens_today"] == 7 and saved["cycles_today"] == 1


def test_the_gate_is_paired_by_default_and_the_seed_rule_is_chosen_by_name(tmp_path: Path) -> None:
    from lousho.improve.errors import OptionInvalid
    from lousho.improve.loop_setup import LoopSetup
    from lousho.improve.options import StepOptions
    from lousho.improve.state import ConfigInvalid, Paths, load_config

    paths = Paths(tmp_path)
    paths.ensure()
    setup = LoopSetup(tmp_path, lambda i, o: None)
    assert StepOptions().gate == "paired"
    assert setup.step_options(load_config(paths), 1000).gate == "paired"
    paths.config.write_text(json.dumps({"gate": "seed"}))
    assert setup.step_options(load_config(paths), 1000).gate == "seed"
    paths.config.write_text(json.dumps({"gate": "sign"}))
    with pytest.raises(ConfigInvalid):
        load_config(paths)
    with pytest.raises(OptionInvalid):
        StepOptions(gate="sign").validate()  # type: ignore[arg-type]
