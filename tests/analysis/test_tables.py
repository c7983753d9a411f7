"""docs/statistics.md is generated from the code and must match it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lousho.analysis import tables


@pytest.mark.slow
def test_docs_statistics_is_what_the_generator_writes_today() -> None:
    """If this fails, run ``.venv/bin/python -m lousho.analysis.tables`` and commit the page."""
    assert tables.DOC.read_text(encoding="utf-8") == tables.render()


@pytest.mark.slow
def test_check_mode_flags_a_stale_page_and_writing_fixes_it(tmp_path: Path) -> None:
    page = tmp_path / "statistics.md"
    page.write_text("stale\n", encoding="utf-8")
    assert tables.main(["--check", "--out", str(page)]) == 1
    assert tables.main(["--out", str(page)]) == 0
    assert tables.main(["--check", "--out", str(page)]) == 0


def test_the_page_carries_the_anchor_figures_and_its_regeneration_command() -> None:
    text = tables.DOC.read_text(encoding="utf-8")
    assert tables.COMMAND in text
    for figure in ("1.992", "2.289", "0.0369", "0.105 / 0.234 / 0.347", "0.886", "0.066"):
        assert figure in text


def test_the_page_has_the_interval_and_monitor_scenario_sections() -> None:
    from lousho.analysis import traffic_model

    text = tables.DOC.read_text(encoding="utf-8")
    intervals = text[text.index("## 8. Intervals by revision"):text.index("## 9.")]
    assert "sessions, sticky 0.9" in intervals and 'interval="wilson"' in intervals
    scenarios = text[text.index("## 11. The monitor on real traffic"):]
    for scenario in traffic_model.SCENARIOS:  # every scenario, with a rate for each design
        assert f"| {scenario.name} | " in scenarios
    assert "| concurrent | stratified | seed |" in scenarios and "| design | no change |" in scenarios


def test_the_scenario_table_measures_each_design_and_the_runs_it_spends() -> None:
    from lousho.analysis import scenario_table
    from lousho.analysis import traffic_model as tm

    by_design = scenario_table.cells(tm.Scenario("sessions, sticky 0.9", sticky=0.9), 2_000, seed=3)
    # The seed rule's false rollbacks in sticky sessions, as the audit found; the others' stay low.
    assert by_design["seed"].rate > 0.2 and by_design["concurrent"].rate < 0.05
    # The concurrent design waits for 60 held-back runs: about five times the runs after the apply.
    assert by_design["concurrent"].runs > 4 * by_design["stratified"].runs and by_design["stratified"].runs <= 60
    assert by_design["concurrent"].edit_runs < by_design["concurrent"].runs
    assert by_design["seed"].edit_runs == by_design["seed"].runs  # before/after: every run after it is the edit's
