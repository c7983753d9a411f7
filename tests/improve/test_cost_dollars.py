"""The gate's cost rule in dollars where prices are known: the scripted model over real HTTP reports the usage
a real model would, and the step prices each run from its record (the price table observe uses, offline).

The edit under test fixes the add cases and makes the agent "think out loud": every call then reads fewer
input tokens and writes more output tokens. On gpt-4o-mini ($0.15 per million input tokens, $0.60 per
million output) a call of 1,000 in and 10 out costs $0.000156, one of 200 in (100 of them from the cache,
at half price) and 400 out $0.0002625: 41% fewer tokens, 68% more dollars per passing run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from improve_support import ADD_FIX, agent_policy, editor_script, make_agent

from lousho.agent.verdict import Verdict
from lousho.improve import StepOptions, format_improve_result, improve_agent
from lousho.improve.pricing import run_usd
from lousho.improve.probe import ProbeResult, UserProbe
from lousho.improve.records import Case, RunRecord
from lousho.models.config import ModelConfig
from lousho.models.script import ScriptRequest
from lousho.models.scripted import ScriptedModelServer

VERBOSE = "Think out loud at length before every answer."
PRICED, UNPRICED = "gpt-4o-mini", "agent"  # genai-prices knows the first, not the second
BASE_USAGE = {"input_tokens": 1000, "output_tokens": 10}
VERBOSE_USAGE = {"input_tokens": 200, "output_tokens": 400, "cache_read_tokens": 100}
NEW_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "model")


def usage_policy(request: ScriptRequest) -> Any:
    """The improve tests' agent, with the usage of every call set by whether the harness says VERBOSE."""
    reply = agent_policy(request)
    usage = VERBOSE_USAGE if VERBOSE in request.system else BASE_USAGE
    return {"content": reply, "usage": usage} if isinstance(reply, str) else {**reply, "usage": usage}


@contextmanager
def servers() -> Iterator[tuple[str, ModelConfig]]:
    with ScriptedModelServer(usage_policy, seed=1) as agent, \
            ScriptedModelServer(editor_script({"invariant": [ADD_FIX, VERBOSE]})) as editor:
        yield agent.url, ModelConfig(editor.url, "editor")


def gate_of(result: Any) -> Any:
    return next(d for d in result.decisions if d.kind == "gate")


@pytest.mark.parametrize("gate", ["paired", "seed"])
def test_an_edit_with_fewer_tokens_but_half_again_the_dollars_is_rejected_in_dollars(
        tmp_path: Path, gate: str) -> None:
    agent, check = make_agent(tmp_path)
    with servers() as (url, editor):
        result = improve_agent(agent, check, StepOptions(model=ModelConfig(url, PRICED), editor_model=editor,
                                                         gate=gate))
    assert result.outcome == "keep-base", result.reason
    decision = gate_of(result)
    cost = decision.evidence["cost"]
    assert decision.outcome == "reject" and cost["unit"] == "usd"
    assert "dollars per passing run rose +68%" in decision.reason, decision.reason
    # Compared on the held-out notes case alone (the add cases pass nothing on the base): 3 calls a run.
    assert cost["cases_compared"] == 1
    assert cost["usd_ratio"] == cost["ratio"] == pytest.approx(0.0002625 / 0.000156)
    assert cost["base_usd_per_pass"] == pytest.approx(3 * 0.000156)
    # In tokens the same edit is 41% cheaper: the seeds' rule would have passed it.
    assert cost["tokens_ratio"] == pytest.approx(600 / 1010)
    assert (cost["base_tokens_per_pass"], cost["candidate_tokens_per_pass"]) == (3 * 1010, 3 * 600)
    assert "tokens per passing run changed -41%" in decision.reason
    rate = next(r for r in decision.evidence["error_rates"] if r["rule"] == "cost")
    assert "dollars per passing run" in rate["meaning"]
    card = format_improve_result(result)
    assert "cost        in dollars: $0.000468 -> $0.000788 per passing run (+68%); tokens per passing run " \
           "3,030 -> 1,800 (-41%)" in card
    assert json.loads(json.dumps(result.to_dict()))["decisions"][-1]["evidence"]["cost"]["unit"] == "usd"


def test_a_model_the_price_table_does_not_know_falls_back_to_tokens_and_says_so(tmp_path: Path) -> None:
    agent, check = make_agent(tmp_path)
    with servers() as (url, editor):
        result = improve_agent(agent, check, StepOptions(model=ModelConfig(url, UNPRICED), editor_model=editor))
    # The same edit, the same usage: in tokens it is cheaper, so it passes the gate.
    assert result.outcome == "proposal", result.reason
    decision = gate_of(result)
    cost = decision.evidence["cost"]
    assert cost["unit"] == "tokens" and cost["usd_ratio"] is None and cost["base_usd_per_pass"] is None
    assert cost["ratio"] == cost["tokens_ratio"] == pytest.approx(600 / 1010)
    assert "cost within the limit (tokens per passing run)" in decision.reason
    rate = next(r for r in decision.evidence["error_rates"] if r["rule"] == "cost")
    assert "tokens per passing run" in rate["meaning"]
    assert "cost        in tokens (not every run has a price): tokens per passing run 3,030 -> 1,800 (-41%)" \
        in format_improve_result(result)


def test_runs_recorded_before_the_split_load_and_are_compared_in_tokens(tmp_path: Path) -> None:
    agent, check = make_agent(tmp_path)
    cache = tmp_path / "cache"
    with servers() as (url, editor):
        options = StepOptions(model=ModelConfig(url, PRICED), editor_model=editor, cache_dir=cache, cached_probe=True)
        first = improve_agent(agent, check, options)
        records = sorted((cache / "probe").glob("*.json"))
        stored = [json.loads(p.read_text()) for p in records]
        # Each run keeps its tokens split and the model it called, as the server reported them.
        verbose = next(r for r in stored if r["tokens"] == 3 * 600)
        assert {k: verbose[k] for k in NEW_FIELDS} == {"input_tokens": 600, "output_tokens": 1200,
                                                       "cache_read_tokens": 300, "model": PRICED}
        assert gate_of(first).evidence["cost"]["unit"] == "usd" and first.outcome == "keep-base"
        # The same runs as older code wrote them: no split, no model.
        for path, record in zip(records, stored, strict=True):
            path.write_text(json.dumps({k: v for k, v in record.items() if k not in NEW_FIELDS}))
        second = improve_agent(agent, check, options)
    assert second.cost.agent_runs == 0 and second.cost.cached_runs == first.cost.agent_runs
    old = RunRecord.from_dict(json.loads(records[0].read_text()))
    assert (old.input_tokens, old.output_tokens, old.cache_read_tokens, old.model) == (0, 0, 0, None)
    # Old runs have no price: the rule counts tokens, and says so.
    cost = gate_of(second).evidence["cost"]
    assert cost["unit"] == "tokens" and cost["usd_ratio"] is None
    assert second.outcome == "proposal", second.reason


def test_a_check_modules_probe_is_priced_when_it_reports_the_split_and_model(tmp_path: Path) -> None:
    def check(input_text: str, output: str | None) -> Verdict:
        return Verdict("pass")

    agent, _ = make_agent(tmp_path)

    def probe(result: ProbeResult) -> RunRecord:
        return UserProbe(lambda harness_dir, case, repeat: result, check)(agent, Case("c", "hello"), 0)

    now = time.time_ns()
    split = probe(ProbeResult("hi", input_tokens=1000, output_tokens=10, model=PRICED))
    assert (split.tokens, split.input_tokens, split.output_tokens, split.model) == (1010, 1000, 10, PRICED)
    assert run_usd(split, now) == pytest.approx(0.000156)
    # A total alone, or a model the table does not know: no price, so the gate counts tokens.
    assert run_usd(probe(ProbeResult("hi", tokens=1010, model=PRICED)), now) is None
    assert run_usd(probe(ProbeResult("hi", input_tokens=1000, output_tokens=10, model=UNPRICED)), now) is None

