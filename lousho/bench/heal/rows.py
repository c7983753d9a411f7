"""The benchmark's output: one JSON object a line, one line per attempt, study attempt or layout arm.

Every line has ``kind`` (``attempt``, ``study`` or ``layout``), the models it ran on (``agent_model``,
``editor_model``: ``scripted`` or the live model's name) and its cost (``requests``, ``agent_runs``,
``tokens``, ``seconds``). The report reads nothing else, so a file can be reported anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lousho.bench.heal.errors import RowsInvalid
from lousho.kernel._checked_json import loads_checked

KINDS = ("attempt", "study", "layout")
_REQUIRED = {"attempt": ("scenario", "passed", "counted", "audit_ok"),
             "study": ("task", "condition", "proposal", "confirmed"),
             "layout": ("arm", "cases", "pass_hat_3", "mean_tokens")}
_COST = ("requests", "agent_runs", "tokens")


class RowWriter:
    """Appends rows as they are made, flushed, so an interrupted run keeps what it finished."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a" if append else "w", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of ``path``, checked; RowsInvalid names the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RowsInvalid(f"{path}: no such file") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(loads_checked(line, _problem))
        except ValueError as e:
            raise RowsInvalid(f"{path}: line {number}: {e}") from None
    return rows


def of_kind(rows: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == kind]


def _problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "expected a JSON object"
    kind = row.get("kind")
    if kind not in KINDS:
        return f"kind must be one of {KINDS}"
    missing = [k for k in (*_REQUIRED[kind], *_COST, "agent_model") if k not in row]
    if missing:
        return f"a {kind} row needs {', '.join(missing)}"
    return None
