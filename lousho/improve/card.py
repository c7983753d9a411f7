"""``format_improve_result``: the plain-text review card of one step.

Model text (editor summaries, the diff's added lines, reasons quoting them) passes through
``injection.plain_text``: a card shows no links, images or HTML from a model.
"""

from __future__ import annotations

from typing import Any

from lousho.improve.injection import plain_text
from lousho.improve.result import ImproveResult


def format_improve_result(result: ImproveResult, *, width: int = 100) -> str:
    lines = [f"lousho improve: {'PROPOSAL' if result.outcome == 'proposal' else 'KEEP BASE'}",
             f"  agent     {result.agent_dir}"]
    if result.base_revision:
        lines.append(f"  base      {result.base_revision}")
    if result.revision:
        lines.append(f"  proposal  {result.revision} ({result.chosen})")
    lines.append(f"  reason    {_clip(plain_text(result.reason), width * 3)}")
    if result.error:
        lines.append(f"  error     {result.error['code']}")
        if result.error.get("hint"):
            lines.append(f"  hint      {result.error['hint']}")
    for flag in result.flags:
        lines.append(f"  FLAG      {plain_text(flag)}")
    if result.decisions:
        lines.append("")
        lines.append("decisions")
        for d in result.decisions:
            reason = _clip(plain_text(d.reason), width)
            lines.append(f"  {d.kind:<12} {_clip(d.subject, 20):<20} {d.outcome:<14} {reason}")
            if d.kind == "gate":
                for row in d.evidence.get("rows", []):
                    rerun = (f", rerun {row['rerun_base']} -> {row['rerun_candidate']} of 3"
                             if row.get("rerun_base") is not None else "")
                    lines.append(f"      {row['label']:<18} {row['base']} -> {row['candidate']} of {row['runs']}"
                                 f"  {row['verdict']}{rerun}")
                if d.evidence.get("gate"):
                    lines.append(f"      gate        {d.evidence['gate']}" + "".join(
                        f"; {s['stage']}: p = {s['p_value']:.3g} {s['verdict']}" for s in d.evidence.get("stages", [])))
                if d.evidence.get("cost"):
                    lines.append(f"      cost        {cost_line(d.evidence['cost'])}")
                for rate in d.evidence.get("error_rates", []):
                    lines.append(f"      error rate  {rate['rule']}: {rate['meaning']} = {rate['value']:.3f}"
                                 f" ({rate['at']}; {rate['method']})")
                    if rate.get("model"):
                        lines.append(f"                  assumes: {plain_text(rate['model'])}")
    c = result.cost
    lines += ["", f"cost  {c.requests} model requests, {c.tokens} tokens, {c.agent_runs} agent runs, "
                  f"{c.editor_requests} editor requests (replayed from the cache: {c.cached_runs} runs, "
                  f"{c.cached_editor_calls} editor calls)"]
    if result.diff:
        lines += ["", "diff"] + [f"  {plain_text(line)}" for line in result.diff.splitlines()]
    return "\n".join(lines) + "\n"


def cost_line(cost: dict[str, Any]) -> str:
    """The cost rule's figures per passing run, base -> candidate, in the unit it compared first."""
    unit = cost.get("unit", "tokens")  # a decision recorded before the unit was: tokens
    if cost.get("ratio") is None:
        return f"in {'dollars' if unit == 'usd' else 'tokens'}: no case passes under both, nothing to compare"
    tokens = (f"tokens per passing run {_figure(cost.get('base_tokens_per_pass'), '{:,.0f}')} -> "
              f"{_figure(cost.get('candidate_tokens_per_pass'), '{:,.0f}')} "
              f"({_change(cost.get('tokens_ratio', cost['ratio'] if unit == 'tokens' else None))})")
    if unit == "usd":
        return (f"in dollars: ${_figure(cost.get('base_usd_per_pass'), '{:.3g}')} -> "
                f"${_figure(cost.get('candidate_usd_per_pass'), '{:.3g}')} per passing run "
                f"({_change(cost.get('ratio'))}); {tokens}")
    return f"in tokens (not every run has a price): {tokens}"


def _figure(value: float | None, form: str) -> str:
    return "?" if value is None else form.format(value)


def _change(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio - 1:+.0%}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
