"""learn: reflection after a decided cycle sees no failed check's name, however the name is spelled, and
what it spends counts in the cycle's tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from improve_support import ADD_FIX
from loop_support import loop

from lousho.improve.cycle import run_cycle
from lousho.improve.learn import failed_check_names
from lousho.improve.state import load_state

# Quotes and a comma: a name that repr() escapes and that a split on quotes cuts in the wrong place.
ODD_NAME = 'it\'s "sum", correct'
QUOTING = {"invariant": [ADD_FIX + " This keeps it's sum correct passing."]}


def _rename_the_sum_check(check: Path) -> None:
    source = check.read_text()
    check.write_text(source.replace('failed_check="sum-correct"', f"failed_check={ODD_NAME!r}"))


@pytest.mark.slow
def test_a_rejected_quote_of_an_odd_check_name_is_hidden_from_reflection(tmp_path: Path) -> None:
    with loop(tmp_path, QUOTING) as (setup, _, editor):
        _rename_the_sum_check(Path(setup.check))
        result = run_cycle(setup)
        reflections = [r for r in editor.requests if r["messages"][0]["content"].startswith("You reflect")]
    assert result.outcome == "kept-base", result.reason
    assert result.step is not None
    quoted = [d for d in result.step.decisions if d.kind == "quoted-check"]
    assert quoted and all(d.evidence["checks"] == [ODD_NAME] for d in quoted)
    assert ODD_NAME in failed_check_names(result.step)
    assert len(reflections) == 1
    shown = reflections[0]["messages"][1]["content"]
    assert "[check name hidden]" in shown and '"sum", correct' not in shown


@pytest.mark.slow
def test_a_cycles_tokens_include_its_reflection(tmp_path: Path) -> None:
    with loop(tmp_path, QUOTING) as (setup, _, editor):
        _rename_the_sum_check(Path(setup.check))
        result = run_cycle(setup)
        reflected = any(r["messages"][0]["content"].startswith("You reflect") for r in editor.requests)
    assert result.outcome == "kept-base" and reflected
    assert result.step is not None and result.tokens > result.step.cost.tokens
    assert result.tokens == load_state(setup.paths).tokens_today  # everything the cycle spent, and only that
