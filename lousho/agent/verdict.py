"""A check's verdict on a run's output: pass, fail (optionally naming the check missed), cannot score."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "cannot-score"]


@dataclass(frozen=True)
class Verdict:
    status: Status
    failed_check: str | None = None
    explanation: str | None = None

    @property
    def passed(self) -> bool | None:
        return {"pass": True, "fail": False}.get(self.status)


# check(input_text, output_text) -> Verdict
Check = Callable[[str, str | None], Verdict]
