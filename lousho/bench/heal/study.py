"""The failure-name study (seed §6.1): does naming the failed check help the editors propose the fix?

For each of ``add-months`` and ``invoice-rounding`` (the task), one improvement step runs on two training
cases, the task first and the other task second (so that shuffling has another name to move), with the
failed-check names shown as they are (``real``), left out (``none``) or moved to another run's record
(``shuffled``), 5 attempts each. A **proposal** is a step that proposes an edit the gate found helped the
task; it is **confirmed** when the task passes at least 5 of 6 fresh runs under it. The plan's bar: real
names beat shuffled ones by at least 3 proposals in 5, per task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from lousho.bench.heal import editors
from lousho.bench.heal.bench import Bench
from lousho.bench.heal.catalog import CONDITIONS, CONFIRM_MIN, CONFIRM_RUNS, STUDY, STUDY_ATTEMPTS, STUDY_TASKS
from lousho.bench.heal.probe import BenchProbe, check_module
from lousho.bench.heal.tasks import case
from lousho.improve.harness import materialize, read_harness
from lousho.improve.options import FailureNames, StepOptions
from lousho.improve.step import improve_agent


def study(bench: Bench, attempts: int | None, check: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    count = STUDY_ATTEMPTS if attempts is None else attempts
    for task, other in STUDY_TASKS:
        for condition in CONDITIONS:
            for index in range(1, count + 1):
                check(f"before the failure-name study's {task} {condition} attempt {index}")
                yield attempt(bench, task, other, condition, index)


def attempt(bench: Bench, task: str, other: str, condition: FailureNames, index: int) -> dict[str, Any]:
    started = time.monotonic()
    a = bench.attempt(f"{STUDY}-{task}-{condition}", index, live_agent=True, live_editor=True)
    try:
        a.use_editors(editors.name_study(a.seed))
        module = check_module([case(task), case(other)], BenchProbe(a.runner), f"heal-bench:{STUDY}")
        result = improve_agent(a.agent_dir, module, StepOptions(model=a.agent_model, failure_names=condition),
                               editor_client=a.editor_client(), environ={})
        proposal = result.outcome == "proposal" and task in result.helped
        passes = 0
        if proposal:
            harness = read_harness(a.agent_dir)
            for path, text in sorted(result.files.items()):
                harness = harness.with_file(path, text)
            where = materialize(harness, a.agent_dir, a.dir / "confirm")
            passes = sum(a.runner.run(where, case(task).input, case_id=task, probe=True).verdict.passed is True
                         for _ in range(CONFIRM_RUNS))
    finally:
        a.close()
    return {"kind": "study", "task": task, "condition": condition, "attempt": index, "seed": a.seed,
            "proposal": proposal, "confirmed": passes >= CONFIRM_MIN, "confirm_passes": passes,
            "step_outcome": result.outcome, "helped": list(result.helped), "reason": result.reason[:500],
            "error": result.error, "seconds": round(time.monotonic() - started, 2), "dir": str(a.dir), **a.models(),
            **a.meter.to_dict()}

