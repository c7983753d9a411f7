"""`lousho runs show`: one run as a person reads it, a vertical summary above its span tree.

A run row has some twenty columns; as one table row they wrap into slivers at 100 columns. The summary
puts one fact a line (agent, revision, models, status, verdict, tokens, cost, input and output,
excerpted), so the run reads top to bottom at any width from 80 columns up. Every value is the agent's
or the model's text: it goes through ``safe_text``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table

from lousho.kernel.text_safety import safe_text, visible

# The input and output are excerpted: the whole text is in `--json` and on the page.
EXCERPT_CHARS = 240


def run_summary(run: dict[str, Any], models: list[str]) -> Table:
    """The run as label/value lines; ``models`` are the models its spans called, in order of first use."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in _lines(run, models):
        grid.add_row(label, safe_text(value))
    return grid


def _lines(run: dict[str, Any], models: list[str]) -> list[tuple[str, str]]:
    lines = [
        ("run", run["run_id"]),
        ("agent", run["agent"] or "(none)"),
        ("revision", run["harness_revision"] or "(not tagged)"),
        ("model", ", ".join(models) or run["model"] or "(none recorded)"),
        ("status", _status(run)),
        ("verdict", verdict(run["passed"])),
        ("tokens", f"{_n(run['input_tokens'])} in, {_n(run['output_tokens'])} out"
                   f" ({_count(run['model_calls'], 'model call')}, {_count(run['tool_calls'], 'tool call')})"),
        ("cost", "unknown" if run["cost_usd"] is None else f"${run['cost_usd']:.6f}"),
        ("started", f"{run['started_at']}, took {_seconds(run['duration_s'])}"),
    ]
    if run["case_id"]:
        lines.append(("case", run["case_id"]))
    if run["error_type"] or run["error_message"]:
        lines.append(("error", " ".join(str(v) for v in (run["error_type"], run["error_message"]) if v)))
    lines.append(("input", excerpt(run["input"])))
    lines.append(("output", excerpt(run["output"])))
    return lines


def verdict(passed: bool | None) -> str:
    """The check's verdict in words; a run no check scored says so rather than leaving a blank."""
    return {True: "pass", False: "fail"}.get(passed, "unscored (no check reported a verdict)")


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """One line: newlines shown as ``\\n`` (by ``visible``), cut at ``limit`` characters."""
    if not text:
        return "(none recorded)"
    flat = visible(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _status(run: dict[str, Any]) -> str:
    attempts = run["attempts"] or 1
    return f"{run['status']}" + (f" after {attempts} attempts" if attempts > 1 else "")


def _n(value: Any) -> str:
    return "0" if value is None else f"{int(value):,}"


def _count(value: Any, noun: str) -> str:
    n = int(value or 0)
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def print_run(console: Console, run: dict[str, Any], models: list[str], tree: Any) -> None:
    """The summary, a blank line, then the span tree."""
    console.print(Group(run_summary(run, models), "", tree))
