"""``lousho runs pending``: every unfinished run, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lousho.recover import durable
from lousho.recover.cli import pending
from lousho.recover.errors import StoreMissing
from lousho.recover.store import RunStore


def _fill(store: RunStore) -> None:
    durable.start(store, "ok", "coder", "send", {}).finish("done")
    durable.start(store, "flaky", "coder", "send", {}).fail(TimeoutError("model timed out"))
    durable.start(store, "live", "triage", "turn", {})
    durable.start(store, "halted", "coder", "send", {}).stop("no progress")


def test_pending_json_lists_every_run_that_is_not_finished(store: RunStore, store_url: str):
    _fill(store)
    result = CliRunner().invoke(pending, ["--store", store_url, "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["run_id"] for r in rows] == ["flaky", "live", "halted"]
    flaky = rows[0]
    assert {"run_id", "agent", "kind", "status", "attempts", "consecutive_failures", "last_error",
            "next_attempt_at", "updated_at"} <= set(flaky)
    assert (flaky["status"], flaky["attempts"], flaky["consecutive_failures"]) == ("interrupted", 1, 1)
    assert flaky["last_error"] == {"message": "TimeoutError: model timed out", "code": "LOUSHO_RUN_EXCEPTION",
                                   "category": None, "retryable": True}
    assert rows[1]["last_error"] is None and rows[1]["kind"] == "turn"


def test_pending_reads_the_store_url_from_lousho_store(store: RunStore, store_url: str):
    _fill(store)
    result = CliRunner().invoke(pending, [], env={"LOUSHO_STORE": store_url}, catch_exceptions=False)
    assert result.exit_code == 0
    assert "flaky" in result.output and "LOUSHO_RUN_EXCEPTION" in result.output and "ok" not in result.output.split()
    assert "3 unfinished runs" in result.output


def test_pending_on_an_empty_store_says_so(store: RunStore, store_url: str):
    result = CliRunner().invoke(pending, ["--store", store_url], catch_exceptions=False)
    assert "no unfinished runs" in result.output
    assert json.loads(CliRunner().invoke(pending, ["--store", store_url, "--json"]).output) == []


def test_pending_never_creates_a_store(tmp_path: Path):
    missing = tmp_path / "runs.db"
    with pytest.raises(StoreMissing):
        CliRunner().invoke(pending, ["--store", f"sqlite:///{missing}"], catch_exceptions=False)
    assert not missing.exists()
