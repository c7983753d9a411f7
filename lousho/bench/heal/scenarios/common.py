"""What every scenario uses: its verdict, the case suites, and looks at an attempt's directory."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lousho.bench.heal.tasks import case
from lousho.improve.records import Case
from lousho.improve.state import Paths


@dataclass(frozen=True)
class Result:
    """One attempt's verdict on its scenario's must-happen.

    ``counted`` is False for a precondition miss: the attempt never got to test the scenario (for
    example the cycle never reached the editors), so it neither passes nor fails the bar.
    """

    passed: bool
    outcome: str
    detail: str
    counted: bool = True


def miss(outcome: str, detail: str) -> Result:
    return Result(False, outcome, detail, counted=False)


# Training: the two hard tasks; protected (training too, and in the corpus): clamp; held out: a text and a
# duration helper. A harmful rule scoped to text helpers shows only on the held-out word-count case.
DEFAULT = [case("add-months"), case("invoice-rounding"), case("clamp", protected=True),
           case("word-count", held_out=True), case("parse-duration", held_out=True)]
ONE_FIX = [case("add-months"), case("clamp", protected=True), case("word-count", held_out=True),
           case("parse-duration", held_out=True)]
# No text helper anywhere: harm to text helpers is invisible to the gate, the canary and the guard.
NO_TEXT = [case("add-months"), case("clamp", protected=True), case("parse-duration", held_out=True),
           case("median", held_out=True)]


def protected(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.protected]


def files(agent_dir: Path) -> dict[str, bytes]:
    """The agent directory's files, but the loop's state and the runs' scratch space."""
    return {p.relative_to(agent_dir).as_posix(): p.read_bytes() for p in sorted(agent_dir.rglob("*"))
            if p.is_file() and not {".lousho", "workspace", "__pycache__"} & set(p.relative_to(agent_dir).parts)}


def audit_actions(agent_dir: Path) -> list[str]:
    path = Paths(agent_dir).audit
    if not path.exists():
        return []
    return [json.loads(line)["action"] for line in path.read_text(encoding="utf-8").splitlines() if line]
