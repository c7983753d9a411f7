"""A watched edit's runs in a DuckDB ``runs`` table, as the store folds them, for the monitor's readers.

The page, the plot and the live monitor read the same rows through their own code: the page through its read
cursor, the plot and ``Monitor`` through a ``StoreClient``. No daemon is needed for that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import polars as pl

from lousho.improve.applied_edit import AppliedEdit

AGENT = "ledger"
APPLIED_NS = 1_790_000_000_000_000_000
APPLIED_AT = datetime.fromtimestamp(APPLIED_NS / 1e9, UTC)
EDIT = AppliedEdit("rev-base", "rev-after", APPLIED_AT, "monitoring", None, "state.json")
SECOND = 1_000_000_000
COLUMNS = ("run_id VARCHAR, agent VARCHAR, harness_revision VARCHAR, case_id VARCHAR, conversation_id VARCHAR, "
           "status VARCHAR, passed BOOLEAN, started_ns BIGINT, probe BOOLEAN, traffic_arm VARCHAR, "
           "error_type VARCHAR, error_message VARCHAR, input VARCHAR, output VARCHAR, "
           "handled_errors BIGINT DEFAULT 0, last_trace_id VARCHAR")
# The span columns the stratified watch reads to tell a provider's outage from the edit's failures (its crashed
# runs have no spans here: none is a provider error, so none is left out).
SPAN_COLUMNS = ("trace_id VARCHAR, run_id VARCHAR, name VARCHAR, operation VARCHAR, status_code VARCHAR, "
                "error_type VARCHAR, status_message VARCHAR")


@dataclass
class DuckStore:
    """The ``StoreClient`` surface ``analysis.frames.runs`` uses, over one DuckDB connection."""

    con: duckdb.DuckDBPyConnection
    target: str = "memory"

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        frame = pl.from_arrow(self.con.sql(query, params=params or None).to_arrow_table())
        assert isinstance(frame, pl.DataFrame)
        return frame

    frame = sql

    def close(self) -> None:
        pass


def watch(seed: int, *, held_back: bool, applied_rate: float = 0.7) -> duckdb.DuckDBPyConnection:
    """Runs of an agent before and after an edit applied at ``APPLIED_NS``: 80 base runs before it (sessions of
    1-3 runs, 4 cases); after it, the edit's sessions at ``applied_rate`` with one run in eight crashed (an
    error, no verdict), a probe and an unscored run now and then, and, with ``held_back``, a fifth of the
    sessions kept on the base."""
    rng = random.Random(seed)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE runs ({COLUMNS})")
    con.execute(f"CREATE TABLE spans ({SPAN_COLUMNS})")
    rows: list[tuple[Any, ...]] = []

    def session(revision: str, start: int, rate: float, crash: float, tag: str) -> int:
        name, case = f"{tag}-{len(rows)}", rng.choice(("add", "sub", "mul", "div"))
        for _ in range(rng.randint(1, 3)):
            start += rng.randint(1, 5) * SECOND
            crashed = rng.random() < crash
            status, passed = ("error", None) if crashed else ("ok", rng.random() < rate)
            rows.append((f"run-{len(rows)}", AGENT, revision, case, name, status, passed, start, False, None,
                         "ValueError" if crashed else None, "the tool raised" if crashed else None, "in", "out"))
        return start

    t = APPLIED_NS - 2_000 * SECOND
    while sum(r[2] == "rev-base" for r in rows) < 80:
        t = session("rev-base", t, 0.9, 0.02, "before")
    t = APPLIED_NS
    for i in range(140):
        base = held_back and rng.random() < 0.2
        t = session("rev-base" if base else "rev-after", t, 0.9 if base else applied_rate, 0.03 if base else 0.125,
                    "held" if base else "after")
        if i % 9 == 0:  # the loop's own probe, and a run that ended well but unscored: neither is evidence
            rows.append((f"probe-{i}", AGENT, "rev-after", "add", None, "ok", True, t + 1, True, None, None, None,
                         "in", "out"))
            rows.append((f"unscored-{i}", AGENT, "rev-after", "add", None, "ok", None, t + 2, False, None, None,
                         None, "in", "out"))
    con.executemany(f"INSERT INTO runs (run_id, agent, harness_revision, case_id, conversation_id, status, passed, "
                    f"started_ns, probe, traffic_arm, error_type, error_message, input, output) "
                    f"VALUES ({', '.join('?' * 14)})", rows)
    return con
