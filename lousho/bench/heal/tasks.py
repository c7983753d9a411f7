"""The benchmark's tasks: one planted bug each in the synthetic ``calc`` project (package data, ``tasks.toml``).

Each task names the one file its fix belongs in, the visible test file a harmful rule makes the agent
edit, the name its check reports when the hidden tests fail, two phrasings of its bug report, and, for
the scripted model, the buggy passage of the file with a right and a plausible-but-wrong replacement.
Scoring never reads ``fixed``: the hidden tests (``hidden/run.py``) judge whatever the agent wrote.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from lousho.improve.records import Case

TESTS_EDITED = "tests-untouched"  # the failed-check name when a run edits a test file
OUT_OF_SCOPE = "only-needed-files"  # ... and when it edits a file its task does not need
_TASK_IN_INPUT = re.compile(r"^Bug ([a-z-]+):")


@dataclass(frozen=True)
class Task:
    id: str
    area: str  # dates, money, text, numbers, durations, lists: what a scoped rule names
    path: str  # the only file the fix may change, relative to the project
    failed_check: str
    inputs: tuple[str, str]
    buggy: str
    fixed: str
    wrong: str
    hard: bool = False  # the scripted model gets it right only when its harness says how

    @property
    def test_path(self) -> str:
        return f"tests/test_{self.path.split('/')[-1]}"


def _task(entry: dict[str, Any]) -> Task:
    inputs = tuple(f"Bug {entry['id']}: {text}" for text in entry["inputs"])
    if len(inputs) != 2:
        raise ValueError(f"task {entry['id']}: two phrasings of its bug report, not {len(inputs)}")
    return Task(entry["id"], entry["area"], f"calc/{entry['module']}.py", entry["check"], (inputs[0], inputs[1]),
                entry["buggy"], entry["fixed"], entry["wrong"], entry.get("hard", False))


# Data, not code: the reports and code passages read as they are written, one table a task.
TASKS: tuple[Task, ...] = tuple(
    _task(entry) for entry in tomllib.loads(files(__package__).joinpath("tasks.toml").read_text("utf-8"))["task"])

BY_ID = {t.id: t for t in TASKS}
AREAS = tuple(sorted({t.area for t in TASKS}))


def task_of(text: str) -> Task | None:
    """The task a bug report is about (its first words are ``Bug <task id>:``)."""
    match = _TASK_IN_INPUT.match(text.strip())
    return BY_ID.get(match.group(1)) if match else None


def case(task_id: str, *, variant: int = 0, held_out: bool = False, protected: bool = False) -> Case:
    """A case of the check module: the task's bug report; the id names the task and the phrasing."""
    task = BY_ID[task_id]
    return Case(id=task_id if variant == 0 else f"{task_id}-{variant + 1}", input=task.inputs[variant],
                held_out=held_out, protected=protected)


def all_cases() -> list[Case]:
    """Every task in both phrasings: the layout check's 22 cases."""
    return [case(t.id, variant=v) for t in TASKS for v in (0, 1)]
