"""What the step passes between its parts: a case, one run of a case, and a harness's files.

A case is a recorded input and what may be said of it; a run record is one run of a case under one
harness, with its verdict, tokens and transcript. Everything here is plain data, so a run record
can be cached as JSON and replayed (as old evidence, never as a fresh run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Source = Literal["check", "failure", "recovery"]
Status = Literal["pass", "fail", "cannot-score"]


@dataclass(frozen=True)
class Case:
    """One recorded input. ``held_out`` cases never reach an editor; ``protected`` cases guard a write."""

    id: str
    input: str
    held_out: bool = False
    protected: bool = False
    source: Source = "check"
    # The failed-check names the runs that made this case missed (from the scores), when known.
    failed_checks: tuple[str, ...] = ()
    # How many failed runs of the live revision this case came from (1 for a check module's case).
    seen: int = 1

    @classmethod
    def from_value(cls, value: Any, index: int, source: Source = "check") -> Case:
        """A check module's ``cases()`` item: a Case, a string, or a mapping with ``input`` (and ``id``,
        ``held_out``, ``protected``)."""
        if isinstance(value, Case):
            return value
        if isinstance(value, str):
            return cls(id=f"case-{index + 1}", input=value, source=source)
        if isinstance(value, Mapping) and isinstance(value.get("input"), str):
            return cls(id=str(value.get("id") or f"case-{index + 1}"), input=value["input"],
                       held_out=bool(value.get("held_out", False)), protected=bool(value.get("protected", False)),
                       source=source)
        raise TypeError(f"case {index + 1}: expected a string or a mapping with an 'input' string, got {value!r:.80}")


@dataclass(frozen=True)
class Recovery:
    """A ``.heal`` fork that passed after its original failed: untrusted evidence for the editors only."""

    case_id: str
    input: str
    failed_output: str | None
    error: str | None
    note: str | None
    healed_output: str | None


@dataclass(frozen=True)
class RunRecord:
    """One run of one case under one harness revision.

    ``messages`` is the transcript after the system prompt (user, assistant, tool messages in the
    OpenAI shape). ``cached`` marks a record replayed from the cache: old evidence, not a new run.

    ``tokens`` is every token the run's model calls used; ``input_tokens`` and ``output_tokens`` split it
    (input includes ``cache_read_tokens``), and ``model`` names the model the run called, so the gate can
    price the run (``lousho.improve.pricing``). A record written before they were kept, or by a probe that
    reports only a total, has zeros and no model: it has no price, and the cost rule counts tokens.
    """

    case_id: str
    revision: str
    repeat: int
    status: Status
    output: str | None = None
    failed_check: str | None = None
    explanation: str | None = None
    tokens: int = 0
    requests: int = 0
    finish_reason: str = "stop"
    error: str | None = None
    messages: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    cached: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    model: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["messages"] = list(self.messages)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        values = dict(data)
        values["messages"] = tuple(values.get("messages") or ())
        return cls(**values)
