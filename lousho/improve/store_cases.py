"""Cases from the observe store: failed runs of the live revision, and recoveries as evidence."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lousho.improve.records import Case, Recovery

if TYPE_CHECKING:
    from lousho.observe.client.store_client import StoreClient


@dataclass(frozen=True)
class StoreCases:
    """What the store gave the step: cases, recoveries, and a note when the agent's runs seem to be under
    another name (``misnamed``: the step says it, since reading no run of the agent is silent otherwise)."""

    cases: list[Case]
    recoveries: list[Recovery]
    misnamed: str | None = None


def cases_from_store(target: str | Path, agent: str, *, recurring_only: bool = False,
                     held_out: Iterable[str] = (), token: str | None = None,
                     ca_cert: Path | None = None) -> StoreCases:
    """Training cases from ``cases_from_failures`` (live revision only, probe runs never) and the
    recoveries of ``cases_from_recoveries`` (never of a held-out case)."""
    from lousho.analysis.cases import cases_from_failures, cases_from_recoveries
    from lousho.observe.client.store_client import connect

    client = connect(target, token=token, ca_cert=ca_cert)
    failures = cases_from_failures(client, agent, recurring_only=recurring_only)
    cases = [Case(id=str(row["case_id"]), input=str(row["input"] or ""), source="failure",
                  failed_checks=tuple(row["failed_checks"] or ()), seen=int(row["count"]))
             for row in failures.iter_rows(named=True) if row["input"]]
    frame = cases_from_recoveries(client, agent, held_out=list(held_out))
    recoveries = [Recovery(str(r["case_id"]), str(r["input"] or ""), r["failed_output"], r["error"], r["note"],
                           r["healed_output"]) for r in frame.iter_rows(named=True)]
    return StoreCases(cases, recoveries, None if cases else _misnamed(client, agent))


def _misnamed(client: StoreClient, agent: str) -> str | None:
    """A note naming the agents with failed runs, when the store has no run at all under ``agent``.

    The name the step reads is agent.toml's or the directory's; a framework names its runs its own way
    (a graph's name, a workflow's), and then the step would read nothing and say nothing.
    """
    if client.sql("SELECT 1 AS one FROM runs WHERE agent = ? AND NOT probe LIMIT 1", [agent]).height:
        return None
    others = client.sql(
        "SELECT agent, count(*) AS failed FROM runs WHERE agent IS NOT NULL AND agent <> ? AND NOT probe "
        "AND (status = 'error' OR passed = false) GROUP BY agent ORDER BY failed DESC, agent LIMIT 5", [agent])
    if not others.height:
        return None
    named = ", ".join(f"{r['agent']!r} ({r['failed']} failed runs)" for r in others.iter_rows(named=True))
    return (f"the store has no run of agent {agent!r} (the name the step reads: --agent-name, else agent.toml's "
            f"name, else the directory's) but has failed runs of {named}: pass --agent-name "
            f"{others['agent'][0]} to learn from them")


def merge_cases(given: list[Case], stored: list[Case]) -> list[Case]:
    """The check module's cases, then the store's failures: one case per input, and ids unique.

    A stored case with the input of a given case is that case (the given one stands: it may be held out or
    protected). A stored case under a given case's id but with another input is another case: it gets an id
    of its own (``live:<id>``), since every count of the step is keyed by id and two cases under one id
    would be counted as one case with twice the runs.
    """
    merged = list(given)
    inputs = {c.input.strip() for c in given}
    ids = {c.id for c in given}
    for case in stored:
        if case.input.strip() in inputs:
            continue
        if case.id in ids:
            case = replace(case, id=_free_id(f"live:{case.id}", ids))
        merged.append(case)
        inputs.add(case.input.strip())
        ids.add(case.id)
    return merged


def _free_id(wanted: str, taken: set[str]) -> str:
    candidate, n = wanted, 1
    while candidate in taken:
        n += 1
        candidate = f"{wanted}-{n}"
    return candidate
