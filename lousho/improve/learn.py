"""Reflection in the loop (seed §3.4 "Learning across cycles"): once a cycle or an applied edit is
decided, one reflection call may add one lesson to the library.

Each returns the tokens the call spent; they are counted against today's budget here, and the caller
adds them to its own total, so a cycle's tokens are everything it spent.
"""

from __future__ import annotations

from lousho.improve import audit, lessons, proposals, reflection
from lousho.improve.card import format_improve_result
from lousho.improve.controls import kill_switch
from lousho.improve.loop_setup import LoopSetup, editor_client, spend
from lousho.improve.result import ImproveResult
from lousho.improve.state import LoopConfig, Paths, WatchedEdit


def failed_check_names(step: ImproveResult) -> list[str]:
    """The failed checks a lesson must not name: the training cases' and those an edit quoted (carried as
    the quoted-check decisions' evidence, exactly as the check module named them)."""
    names = sorted({n for c in step.training for n in c.failed_checks})
    names += [n for d in step.decisions if d.kind == "quoted-check" for n in d.evidence.get("checks", ())]
    return names


def after_cycle(setup: LoopSetup, config: LoopConfig, step: ImproveResult, outcome: str, cycle_id: str) -> int:
    """At most one lesson from a decided cycle: the card, diff, verdicts and outcome, never a transcript."""
    client = editor_client(setup, config)
    if client is None or kill_switch(setup.paths, setup.environ):
        return 0
    verdicts = [(row["label"], f"{row['verdict']}: {row['base']} -> {row['candidate']} of {row['runs']} ({d.subject})")
                for d in step.decisions if d.kind == "gate" for row in d.evidence.get("rows", [])]
    names = failed_check_names(step)
    result = reflection.reflect(client, card=format_improve_result(step), diff=step.diff, verdicts=verdicts,
                                outcome=outcome, failed_checks=names)
    _keep(setup.paths, result, names, cycle_id, {"cycle": cycle_id})
    return result.tokens


def after_edit(setup: LoopSetup, config: LoopConfig, watched: WatchedEdit, outcome: str) -> int:
    """At most one lesson once an applied edit is decided (kept or rolled back): from its proposal's card
    and diff."""
    client = editor_client(setup, config)
    if not watched.proposal or client is None or kill_switch(setup.paths, setup.environ):
        return 0
    try:
        data = proposals.load(setup.paths, watched.proposal)
    except proposals.ProposalNotFound:
        return 0
    names = [c.get("failed_check") for c in data.get("training", []) if c.get("failed_check")]
    result = reflection.reflect(client, card=data.get("card", ""), diff=data.get("diff", ""), verdicts=[],
                                outcome=outcome, failed_checks=names)
    _keep(setup.paths, result, names, str(data.get("cycle", "")), {"proposal": watched.proposal})
    return result.tokens


def _keep(paths: Paths, result: reflection.Reflection, names: list[str], cycle: str, where: dict[str, str]) -> None:
    spend(paths, result.tokens)
    if result.lesson:
        added = lessons.add(paths, result.lesson, cycle=cycle, failed_checks=names)
        if isinstance(added, str):
            audit.append(paths, "lesson-refused", **where, reason=added)
        else:
            audit.append(paths, "lesson", **where, lesson=added.id, text=added.text)
