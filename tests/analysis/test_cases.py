"""Failures into cases and recoveries into evidence, on a store filled through the daemon."""

from __future__ import annotations

import pytest
from agent_runs import emit_run

from lousho.analysis import cases_from_failures, cases_from_recoveries, live_revision, pass_rates, runs
from lousho.observe import connect, instrument


@pytest.fixture(scope="module")
def store(shared_daemon):
    provider = instrument("cases-test", shared_daemon.url)
    # The old revision failed a lot; none of that may show up as a case of the live one.
    for i in range(4):
        emit_run(provider, f"old-{i}", revision="rev-old", case="add-months", outcome="fail")
    # Live revision rev-new: add-months fails twice, invoice-rounding once (plus one pass),
    # an errored run without a case id, and probe runs that fail on the same cases.
    emit_run(provider, "new-1", revision="rev-new", case="add-months", outcome="fail", failed_check="test_leap")
    emit_run(provider, "new-2", revision="rev-new", case="add-months", outcome="fail", failed_check="test_eom")
    emit_run(provider, "new-3", revision="rev-new", case="invoice-rounding", outcome="fail")
    emit_run(provider, "new-4", revision="rev-new", case="invoice-rounding", outcome="pass")
    emit_run(provider, "new-5", revision="rev-new", outcome="error", input_text="summarise the log")
    emit_run(provider, "new-6", revision="rev-new", case="parse-dates", outcome="pass", tokens=(300, 100))
    for i in range(3):
        emit_run(provider, f"probe-{i}", revision="rev-new", case="parse-dates", outcome="fail", probe=True)
    # A probe of a newer candidate revision must not make that revision "live".
    emit_run(provider, "probe-cand", revision="rev-cand", case="add-months", outcome="pass", probe=True)
    # Another agent's failures stay its own.
    emit_run(provider, "other-1", agent="triage", revision="rev-t", case="add-months", outcome="fail")
    # Recoveries: a failed run and its .heal fork that passed on the same input; one on a held-out case;
    # one whose fork failed too; one whose fork ran on a different input.
    emit_run(provider, "r1", revision="rev-new", case="tz-shift", outcome="error", input_text="shift tz")
    emit_run(provider, "r1.heal", revision="rev-new", case="tz-shift", outcome="pass", input_text="shift tz",
             healed_from="r1", note="previous attempt failed with: provider said 429")
    emit_run(provider, "r2", revision="rev-new", case="held-case", outcome="fail", input_text="h")
    emit_run(provider, "r2.heal", revision="rev-new", case="held-case", outcome="pass", input_text="h",
             healed_from="r2", note="n")
    emit_run(provider, "r3", revision="rev-new", case="c3", outcome="fail", input_text="x")
    emit_run(provider, "r3.heal", revision="rev-new", case="c3", outcome="fail", input_text="x", healed_from="r3")
    emit_run(provider, "r4", revision="rev-new", case="c4", outcome="fail", input_text="y")
    emit_run(provider, "r4.heal", revision="rev-new", case="c4", outcome="pass", input_text="other",
             healed_from="r4")
    provider.shutdown()
    return connect(shared_daemon.url)


@pytest.mark.system
def test_live_revision_is_the_newest_non_probe_revision(store):
    assert live_revision(store, "coder") == "rev-new"
    assert live_revision(store, "triage") == "rev-t"
    assert live_revision(store, "nobody") is None


@pytest.mark.system
def test_cases_from_failures_takes_only_the_live_revision_and_no_probe_runs(store):
    cases = cases_from_failures(store, "coder")
    by_case = {row["case_id"]: row for row in cases.iter_rows(named=True)}
    assert by_case["add-months"]["count"] == 2
    assert by_case["add-months"]["run_ids"] == ["new-1", "new-2"]
    assert by_case["add-months"]["failed_checks"] == ["test_eom", "test_leap"]
    assert by_case["add-months"]["revision"] == "rev-new"
    assert by_case["invoice-rounding"]["count"] == 1
    assert "parse-dates" not in by_case  # only probes failed there
    errored = [row for row in by_case.values() if row["input"] == "summarise the log"]
    assert len(errored) == 1 and errored[0]["case_id"].startswith("input:")
    assert errored[0]["errors"] == ["rate-limit: provider said 429"]
    assert all("old-" not in rid for row in by_case.values() for rid in row["run_ids"])


@pytest.mark.system
def test_recurring_only_keeps_cases_seen_in_two_or_more_runs(store):
    cases = cases_from_failures(store, "coder", recurring_only=True)
    # c3 failed in r3 and again in its .heal fork: two runs.
    assert cases["case_id"].to_list() == ["add-months", "c3"]


@pytest.mark.system
def test_cases_of_an_explicit_older_revision(store):
    cases = cases_from_failures(store, "coder", revision="rev-old")
    assert cases.select("case_id", "count").to_dicts() == [{"case_id": "add-months", "count": 4}]


@pytest.mark.system
def test_unknown_agent_or_revision_gives_an_empty_frame_with_the_columns(store):
    for frame in (cases_from_failures(store, "nobody"), cases_from_failures(store, "coder", revision="nope")):
        assert frame.height == 0
        assert {"case_id", "input", "run_ids", "count", "failed_checks"} <= set(frame.columns)
    assert runs(store, agent="nobody").height == 0
    assert runs(store, agent="nobody", revision="live").height == 0
    assert cases_from_recoveries(store, "nobody").height == 0


@pytest.mark.system
def test_cases_from_recoveries_pairs_a_failure_with_the_heal_fork_that_passed(store):
    pairs = cases_from_recoveries(store, "coder", held_out=["held-case"])
    assert pairs.select("case_id", "failed_run_id", "healed_run_id", "untrusted").to_dicts() == [
        {"case_id": "tz-shift", "failed_run_id": "r1", "healed_run_id": "r1.heal", "untrusted": True}
    ]
    row = pairs.row(0, named=True)
    assert row["note"] == "previous attempt failed with: provider said 429"
    assert row["error"] == "rate-limit: provider said 429"
    with_held = cases_from_recoveries(store, "coder")
    assert sorted(with_held["case_id"].to_list()) == ["held-case", "tz-shift"]


@pytest.mark.system
def test_runs_frame_leaves_probes_out_unless_asked(store):
    live = runs(store, agent="coder", revision="live")
    assert not live["probe"].any()
    assert set(live["run_id"].to_list()) >= {"new-1", "new-6"}
    with_probes = runs(store, agent="coder", revision="rev-new", include_probes=True)
    assert with_probes["probe"].sum() == 3


@pytest.mark.system
def test_pass_rates_by_revision_have_intervals_pass_hat_k_and_tokens(store):
    frame = pass_rates(runs(store, agent="coder"), k=2)
    rows = {row["harness_revision"]: row for row in frame.iter_rows(named=True)}
    old = rows["rev-old"]
    assert (old["runs"], old["passes"], old["pass_rate"]) == (4, 0, 0.0)
    # Four failed runs of one case (no session): one cluster, so the interval cannot say much.
    assert old["clusters"] == 1 and old["ci_low"] == 0.0 and old["ci_high"] > 0.9
    assert old["ci_method"].startswith("95% cluster-robust")
    wilson = {row["harness_revision"]: row for row in pass_rates(runs(store, agent="coder"), k=2,
                                                                 interval="wilson").iter_rows(named=True)}
    assert wilson["rev-old"]["ci_low"] == 0.0 and 0.45 < wilson["rev-old"]["ci_high"] < 0.50  # Wilson 0/4
    assert wilson["rev-old"]["ci_method"].startswith("95% Wilson")
    assert old["pass_hat_2"] == 0.0
    new = rows["rev-new"]
    # Scored non-probe runs of rev-new: new-1..4, new-6, r1.heal..r4.heal and r2..r4 (not errored ones).
    assert new["runs"] == new["passes"] + (new["runs"] - new["passes"])
    assert new["ci_low"] < new["pass_rate"] < new["ci_high"]
    # Seven clusters of 12 runs: where one bound cannot miss, the other takes the whole 5% (one-sided t at 6
    # degrees, 1.94 against Wilson's two-sided 1.96), so the interval is about Wilson's, not wider.
    assert new["design_effect"] >= 1.0 and new["clusters"] == 7
    assert new["ci_low"] == pytest.approx(wilson["rev-new"]["ci_low"], abs=0.01)
    assert new["ci_high"] == pytest.approx(wilson["rev-new"]["ci_high"], abs=0.01)
    assert new["tokens_per_passing_run"] > 120  # new-6 spent 400 tokens, the others 120
    by_case = pass_rates(runs(store, agent="coder"), by=["case_id", "harness_revision"], k=1)
    assert by_case.height >= 2 and set(by_case.columns) >= {"case_id", "harness_revision", "pass_hat_1"}


def test_an_empty_store_gives_empty_frames(tmp_path):
    from lousho.observe.store.span_store import SpanStore

    SpanStore(tmp_path / "empty.duckdb").close()
    store = connect(tmp_path / "empty.duckdb")
    try:
        assert cases_from_failures(store, "coder").height == 0
        assert cases_from_failures(store, "coder", revision="rev-1", recurring_only=True).height == 0
        assert cases_from_recoveries(store, "coder").height == 0
        assert runs(store).height == 0
        assert live_revision(store, "coder") is None
        assert pass_rates(runs(store)).height == 0
    finally:
        store.close()


def test_pass_rates_from_only_the_columns_they_read_equal_those_from_whole_runs(store):
    from lousho.analysis.frames import PASS_RATE_COLUMNS

    narrow = runs(store, agent="coder", columns=PASS_RATE_COLUMNS)
    assert narrow.columns == list(PASS_RATE_COLUMNS)
    assert pass_rates(narrow, k=2).equals(pass_rates(runs(store, agent="coder"), k=2))
    with pytest.raises(ValueError, match="not a column name"):
        runs(store, columns=["passed; DROP TABLE spans"])
