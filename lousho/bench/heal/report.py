"""The report of a benchmark's rows: each bar with its counts and verdict, the layout decision, the cost
per scenario, and the overall verdict on the last line (``verdict: <VERDICT>``). Plain text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lousho.bench.heal.bars import Bar, bars, layout_decisions, verdict
from lousho.bench.heal.rows import of_kind


def report(rows: Sequence[dict[str, Any]], source: str = "") -> tuple[str, str]:
    """The report's text and its verdict."""
    all_bars = bars(rows)
    final = verdict(all_bars)
    lines = [f"heal benchmark report{': ' + source if source else ''} ({len(rows)} rows)", "", "bars"]
    table = [("bar", "models", "needs", "counts", "verdict")]
    for bar in all_bars:
        table.append((bar.name + (" (planted harm)" if bar.planted_harm else ""), _models(rows, bar), bar.need,
                      bar.counts, bar.status))
    lines += _table(table)
    lines += ["", f"gate that ran: {_gates(rows)}", f"monitor that ran: {_monitors(rows)}",
              f"cost rule unit: {_cost_units(rows)}"]
    lines += ["", "must happen"] + [f"  {b.name}: {b.what}" for b in all_bars if b.what]
    lines += ["", "layout check (pass^3 over 22 cases, mean tokens per run)"]
    arms = of_kind(rows, "layout")
    if arms:
        lines += _table([("arm", "model", "runs", "pass^3", "mean tokens")] + [
            (r["arm"], r["agent_model"], str(sum(c["runs"] for c in r["cases"].values())),
             "-" if r["pass_hat_3"] is None else f"{r['pass_hat_3']:.3f}", f"{r['mean_tokens']:,.0f}") for r in arms])
        lines += [f"  {line}" for line in layout_decisions(rows)]
    else:
        lines.append("  not run")
    lines += ["", "what is simulated"] + [f"  - {line}" for line in SIMULATED]
    if any(r["agent_model"] == "scripted" or r.get("editor_model") == "scripted" for r in rows):
        lines.append(f"  - {SCRIPTED_NOTE}")
    lines += ["", "cost by scenario"]
    lines += _table([("scenario", "rows", "requests", "agent runs", "tokens", "seconds")] + _costs(rows))
    lines += ["", f"verdict: {final}"]
    return "\n".join(lines) + "\n", final


SIMULATED = (
    "the users: each live session is one bug report drawn at random from a scenario's mix, sent with no time "
    "between sessions (true-fix, healthy, canary-traffic, stable-monitor)",
    "a person: the forced writes (planted-forced, stable-monitor), the hand edit that makes an approve stale "
    "(manual), the kill switch file (kill-switch), and the corpus an earlier cycle would have left (planted-forced, "
    "stable-monitor)",
    "the daemon's trigger: healthy applies the seeds' rule (--trigger seed, 20 runs against 20) to the store "
    "instead of running it in the daemon; the default CUSUM needs a reference of 1,000 scored runs first",
    "not simulated: the traffic canary and the monitor judge real routed, scored sessions in the benchmark's own "
    "observe daemon",
)
SCRIPTED_NOTE = ("rows on 'scripted' models test the loop's mechanics against a behavioural policy "
                 "(docs/benchmarks.md), not what a real model would do with the same harness")


def _gates(rows: Sequence[dict[str, Any]]) -> str:
    """The gates named by the gate decisions of the attempts' proposals (paired: the default; seed: by name)."""
    return _named(rows, "gates", "no proposal in these rows names its gate")


def _monitors(rows: Sequence[dict[str, Any]]) -> str:
    """The designs the attempts' monitor verdicts recorded (concurrent: the default, stratified when no session
    was held back; seed: by name)."""
    return _named(rows, "monitors", "no monitor verdict in these rows names its design")


def _named(rows: Sequence[dict[str, Any]], field: str, missing: str, shown: dict[str, str] | None = None) -> str:
    """What the attempts recorded in ``field`` (a list of names per attempt), each with its attempts; ``shown``
    renames a recorded name for the reader."""
    attempts = of_kind(rows, "attempt")
    seen = sorted({name for r in attempts for name in r.get(field, [])})
    if not seen:
        return f"not recorded ({missing})"
    counts = {name: sum(name in r.get(field, []) for r in attempts) for name in seen}
    return ", ".join(f"{(shown or {}).get(name, name)} ({n} attempts)" for name, n in counts.items())


def _cost_units(rows: Sequence[dict[str, Any]]) -> str:
    """The units the proposals' cost rules compared: usd where every run had a price, else tokens."""
    return _named(rows, "cost_units", "no proposal in these rows records its cost rule", {"usd": "dollars"})


def _models(rows: Sequence[dict[str, Any]], bar: Bar) -> str:
    mine = [r for r in rows if _group(r) == bar.name or (bar.name.startswith("failure-names") and
                                                         r["kind"] == "study" and bar.name.endswith(r["task"]))]
    if bar.name == "audit":
        mine = of_kind(rows, "attempt")
    agents = sorted({r["agent_model"] for r in mine})
    editors = sorted({r.get("editor_model", "scripted") for r in mine})
    if not agents:
        return "-"
    return f"agent {'/'.join(agents)}, editors {'/'.join(editors)}"


def _group(row: dict[str, Any]) -> str:
    if row["kind"] == "attempt":
        return str(row["scenario"])
    if row["kind"] == "study":
        return f"failure-names {row['task']}"
    return "layout"


def _costs(rows: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_group(row), []).append(row)
    out = []
    for name, mine in [*groups.items(), ("total", list(rows))]:
        out.append((name, str(len(mine)), f"{sum(r['requests'] for r in mine):,}",
                    f"{sum(r['agent_runs'] for r in mine):,}", f"{sum(r['tokens'] for r in mine):,}",
                    f"{sum(r.get('seconds', 0) for r in mine):,.0f}"))
    return out


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
