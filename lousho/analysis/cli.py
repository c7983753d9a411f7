"""``lousho stats``: operating characteristics of the monitor and gate rules."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from lousho.analysis import _checks
from lousho.analysis._names import RULES
from lousho.analysis.errors import BadInputError

# The statistics modules are imported inside each command: SciPy takes about a second to import,
# and every other ``lousho`` command (which imports this module through the group) would pay it.


@click.group()
def stats() -> None:
    """Exact operating characteristics of the loop's decision rules."""


@stats.command("monitor")
@click.option("--p0", type=float, required=True, help="Base pass rate (both sides, for the false alarm).")
@click.option("--p1", type=float, required=True, help="Applied pass rate to compute power against.")
@click.option("--rule", type=click.Choice(RULES), default="seed", show_default=True)
@click.option("--alpha", type=float, default=None, help="One-sided level (not seed)  [default: 0.05]")
@click.option("--looks", default="20,40,60", show_default=True, help="Runs per side at each look.")
@click.option("--min-drop", type=float, default=0.05, show_default=True, help="Drop needed too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def monitor(
    p0: float, p1: float, rule: str, alpha: float | None, looks: str, min_drop: float, as_json: bool
) -> None:
    """False alarm, power (by look) and expected runs of a monitor rule, exactly."""
    from lousho.analysis.boundaries import make_boundary
    from lousho.analysis.operating import monitor_characteristics

    _checks.probability("p0", p0)
    _checks.probability("p1", p1)
    if alpha is not None:
        _checks.alpha(alpha)
    boundary = make_boundary(rule, _parse_looks(looks), alpha, min_drop=min_drop)
    result = monitor_characteristics(boundary, p0, p1)
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
        return
    level = "z >= 2.1" if result.alpha is None else f"one-sided alpha {result.alpha}"
    title = (
        f"{result.rule} rule ({level}, drop > {result.min_drop}): "
        f"base {result.p0} vs applied {result.p1}"
    )
    rows = [
        (str(k + 1), str(n), f"{z:.3f}", f"{fa:.4f}", f"{pw:.4f}")
        for k, (n, z, fa, pw) in enumerate(
            zip(result.looks, result.boundaries, result.false_alarm_by_look, result.power_by_look,
                strict=True)
        )
    ]
    footer = (
        f"false alarm {result.false_alarm:.4f}, power {result.power:.4f}; expected runs per side "
        f"{result.expected_runs:.1f} at p1, {result.expected_runs_null:.1f} at p0"
    )
    headers = ("look", "runs/side", "z boundary", "false alarm (cum.)", "power (cum.)")
    _show(title, headers, rows, footer)


@stats.command("gate")
@click.option("--p0", type=float, required=True, help="Base pass rate of each case.")
@click.option("--p1", type=float, default=None, help="Candidate pass rate (default: p0, no change).")
@click.option("--cases", type=int, default=5, show_default=True, help="Cases in the gate.")
@click.option("--runs", type=int, default=3, show_default=True, help="Fresh runs per case per side.")
@click.option("--min-gain", type=int, default=2, show_default=True, help="'Helped' margin.")
@click.option("--rerun", type=int, default=3, show_default=True, help="Held-out reruns a side.")
@click.option("--held-out-min-drop", type=int, default=2, show_default=True)
@click.option("--canary-runs", type=int, default=6, show_default=True)
@click.option("--canary-min", type=int, default=5, show_default=True)
@click.option("--max-token-rise", type=float, default=0.5, show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Sign-test level.")
@click.option("--cv", type=float, default=0.5, show_default=True, help="Token CV (cost rule).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def gate(
    p0: float, p1: float | None, cases: int, alpha: float, cv: float, as_json: bool, **rule_options: Any
) -> None:
    """Error rates of the gate, held-out, canary, cost and paired rules at p0 and p0 -> p1."""
    from lousho.analysis.gate_report import gate_report
    from lousho.analysis.gates import GateRules

    # The rule options are named as GateRules' fields; --alpha is its sign_alpha.
    rules = GateRules(sign_alpha=alpha, **rule_options)
    report = gate_report(p0, p0 if p1 is None else p1, cases=cases, cv=cv, rules=rules)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
        return
    rows = [
        (row.name, row.description, f"{row.no_change:.4f}", f"{row.change:.4f}", row.method)
        for row in report.rows
    ]
    title = f"gate rules over {report.cases} cases: base {report.p0}, candidate {report.p1}"
    headers = ("rule", "event", f"P at {report.p0} (no change)", f"P at {report.p1}", "method")
    _show(title, headers, rows, report.note)


def _parse_looks(text: str) -> tuple[int, ...]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadInputError("looks", text, "comma-separated run counts, e.g. 20,40,60") from None
    return _checks.looks(values)


def _show(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], footer: str
) -> None:
    """A rich table on a terminal; aligned plain text otherwise (pipes, files, tests)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        from lousho.kernel.text_safety import safe_text

        # Cells quote the user's arguments: shown as text, never parsed as markup.
        table = Table(title=safe_text(title, "table.title"), caption=safe_text(footer, "table.caption"))
        for header in headers:
            table.add_column(safe_text(header))
        for row in rows:
            table.add_row(*(safe_text(cell) for cell in row))
        Console(highlight=False).print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    click.echo(title)
    for line in (headers, *rows):
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    click.echo(footer)
