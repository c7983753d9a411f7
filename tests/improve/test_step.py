"""improve_agent() end to end: the scripted model plays the agent and the editors over real HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from improve_support import (
    ADD_CASES,
    ADD_FIX,
    DOUBLE_CHECK,
    HARM,
    HELD_OUT,
    NOOP,
    editor_script,
    make_agent,
)

from lousho.improve import StepOptions, format_improve_result, improve_agent
from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer


@contextmanager
def editors(plans: dict[str, Any], **kw: Any) -> Iterator[tuple[ModelConfig, ScriptedModelServer]]:
    with ScriptedModelServer(editor_script(plans, **kw)) as server:
        yield ModelConfig(server.url, "editor"), server


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def step(tmp_path: Path, agent_model: ModelConfig, plans: dict[str, Any], **kw: Any):  # type: ignore[no-untyped-def]
    agent, check = make_agent(tmp_path, kw.pop("cases", None))
    before = tree_hash(agent)
    with editors(plans, select=kw.pop("select_answer", "A")) as (editor, server):
        inputs = {k: kw.pop(k) for k in ("recoveries", "lessons") if k in kw}  # the rest are options
        result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=editor, **kw), **inputs)
        requests = server.requests
    assert tree_hash(agent) == before, "a step must write nothing to the agent directory"
    return result, requests


def test_a_true_fix_becomes_a_proposal(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [ADD_FIX]})
    assert result.outcome == "proposal", result.reason
    assert f"+{ADD_FIX}" in result.diff
    assert result.files["instructions.md"].endswith(ADD_FIX + "\n")
    gate = [d for d in result.decisions if d.kind == "gate"]
    assert gate[0].outcome == "pass"
    rows = {r["label"]: r for r in gate[0].evidence["rows"]}
    assert rows["training case 1"]["base"] == 0 and rows["training case 1"]["candidate"] == 3
    # The decision says what it could have got wrong: exact rates of the rules it applied.
    rates = {r["rule"] for r in gate[0].evidence["error_rates"]}
    assert {"training", "held-out", "cost"} <= rates
    # Each rate says its model: the per-case base rates it assumed and the candidates tried.
    assert gate[0].evidence["gate"] == "paired" and gate[0].evidence["stages"][0]["stage"] == 1
    for rate in gate[0].evidence["error_rates"]:
        assert rate["model"] and rate["candidates"] >= 1
    training = [r for r in gate[0].evidence["error_rates"] if r["rule"] == "training"]
    assert any("pooled passes [" in r["model"] and "posterior" in r["model"] for r in training)
    assert any(r["value"] == 0.05 and "bound" in r["method"] for r in training)
    assert result.cost.agent_runs > 0 and result.cost.requests > 0 and result.cost.tokens > 0
    card = format_improve_result(result)
    assert "PROPOSAL" in card and ADD_FIX in card and "error rate" in card


def test_an_edit_that_changes_no_verdict_keeps_the_base(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [NOOP]})
    assert result.outcome == "keep-base"
    assert "no proposal improved a training case" in result.reason
    assert result.diff == "" and result.error is None


def test_no_edit_at_all_keeps_the_base(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {})
    assert result.outcome == "keep-base"
    assert [d.outcome for d in result.decisions if d.kind == "editor"] == ["no edit", "no edit"]


def test_an_edit_that_breaks_a_held_out_case_is_rejected_at_the_gate(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [ADD_FIX, HARM]})
    assert result.outcome == "keep-base"
    gate = [d for d in result.decisions if d.kind == "gate"]
    assert gate and gate[0].outcome == "reject" and gate[0].evidence["gate"] == "paired"
    assert "held-out cases got worse" in gate[0].reason and "held-out case 1 dropped 3 -> 0 of 3" in gate[0].reason
    assert gate[0].evidence["stages"][-1]["stage"] == "held-out"


def test_the_seed_gate_by_name_reruns_a_dropped_held_out_case(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [ADD_FIX, HARM]}, gate="seed")
    gate = [d for d in result.decisions if d.kind == "gate"]
    assert result.outcome == "keep-base" and gate[0].evidence["gate"] == "seed"
    assert "held-out case 1 dropped 6 runs in 6" in gate[0].reason
    row = next(r for r in gate[0].evidence["rows"] if r["held_out"])
    assert (row["base"], row["candidate"], row["rerun_base"], row["rerun_candidate"]) == (3, 0, 3, 0)


def test_a_quoted_failed_check_is_rejected_or_flagged(tmp_path: Path, agent_model: ModelConfig) -> None:
    quoting = {"invariant": [ADD_FIX + " This keeps sum-correct passing."]}
    rejected, _ = step(tmp_path / "reject", agent_model, quoting, quoted_checks="reject")
    assert rejected.outcome == "keep-base"
    assert any(d.kind == "quoted-check" and d.outcome == "reject" and "sum-correct" in d.reason
               for d in rejected.decisions)
    assert not [d for d in rejected.decisions if d.kind == "gate"], "a rejected quote never reaches the gate"
    flagged, _ = step(tmp_path / "flag", agent_model, quoting, quoted_checks="flag")
    assert flagged.outcome == "proposal"
    assert flagged.flags and "sum-correct" in flagged.flags[0]
    assert "FLAG" in format_improve_result(flagged)


def test_a_costlier_edit_over_half_again_the_tokens_is_rejected(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [ADD_FIX, DOUBLE_CHECK]})
    assert result.outcome == "keep-base"
    gate = next(d for d in result.decisions if d.kind == "gate")
    assert "tokens per passing run rose" in gate.reason
    assert gate.evidence["cost"]["ratio"] > 1.5
    # Compared only on the cases passing under both: the held-out notes case (training passed 0 before).
    assert gate.evidence["cost"]["cases_compared"] == 1


def test_all_training_cases_passing_stops_before_the_editors(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, requests = step(tmp_path, agent_model, {"invariant": [ADD_FIX]},
                            cases=[{"id": "n", "input": "note: a, b"}])
    assert result.outcome == "keep-base" and "passed every run" in result.reason
    assert requests == [], "no editor was asked"


def test_held_out_cases_and_training_split(tmp_path: Path, agent_model: ModelConfig) -> None:
    result, _ = step(tmp_path, agent_model, {"invariant": [ADD_FIX]}, cases=ADD_CASES + HELD_OUT)
    gate = next(d for d in result.decisions if d.kind == "gate")
    labels = [r["label"] for r in gate.evidence["rows"]]
    assert labels == ["training case 1", "training case 2", "held-out case 1"]
