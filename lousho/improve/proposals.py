"""Proposals: a cycle's edit saved for a write, now (auto mode) or after a person's approve (manual).

``.lousho/proposals/<id>.json`` holds the edit's base and revision (both saved by the writer), its diff
and review card, the lessons its editors cited, the training cases and which of them it helped. Its
``status`` moves once, from ``pending``, through :func:`set_status` only.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from lousho.improve import writer
from lousho.improve.card import format_improve_result
from lousho.improve.harness import Harness
from lousho.improve.result import ImproveResult
from lousho.improve.state import Paths, iso, now_utc, write_json

# pending: waiting for a write or a person. traffic: served to a share of sessions first. Then one of:
# applied, rejected (by a person), stale (the harness changed since it was made), refused (the writer's
# checks), retired (the traffic canary found it no better).
ProposalStatus = Literal["pending", "traffic", "applied", "rejected", "stale", "refused", "retired"]


class ProposalNotFound(writer.RevisionMissing):
    code = "LOUSHO_IMPROVE_PROPOSAL_NOT_FOUND"
    hint = "`lousho improve status DIR` lists the proposals"


def load(paths: Paths, proposal_id: str) -> dict[str, Any]:
    path = paths.proposals / f"{proposal_id}.json"
    if not path.exists() or "/" in proposal_id or proposal_id.startswith("."):
        raise ProposalNotFound(f"no proposal {proposal_id!r} in {paths.proposals}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def list_all(paths: Paths) -> list[dict[str, Any]]:
    if not paths.proposals.is_dir():
        return []
    return [load(paths, p.stem) for p in sorted(paths.proposals.glob("*.json"))]


def save(paths: Paths, step: ImproveResult, base: Harness, target: Harness, cycle_id: str, cited: list[str]) -> str:
    """Save the step's edit (and both revisions) as a pending proposal; return its id."""
    writer.save_revision(paths, base)
    writer.save_revision(paths, target)
    proposal_id = f"p-{cycle_id[2:]}"
    write_json(paths.proposals / f"{proposal_id}.json", {
        "id": proposal_id, "cycle": cycle_id, "status": "pending", "base": base.revision,
        "revision": target.revision, "diff": step.diff, "card": format_improve_result(step),
        "flags": list(step.flags), "created_at": iso(now_utc()), "cited": cited, "helped": list(step.helped),
        "training": [{"id": c.id, "input": c.input} for c in step.training],
        # The gate's decisions with their tests and error rates, each rate with the model it assumes, and the
        # cost rule's figures with the unit it compared (usd, or tokens when not every run has a price).
        "gate": [{"candidate": d.subject, "outcome": d.outcome, "gate": d.evidence.get("gate"),
                  "stages": d.evidence.get("stages", []), "error_rates": d.evidence.get("error_rates", []),
                  "cost": d.evidence.get("cost")}
                 for d in step.decisions if d.kind == "gate"],
    })
    return proposal_id


def set_status(paths: Paths, proposal_id: str, status: ProposalStatus) -> dict[str, Any]:
    """Record the proposal's new status; return the proposal as saved."""
    data = load(paths, proposal_id)
    data["status"] = status
    write_json(paths.proposals / f"{proposal_id}.json", data)
    return data
