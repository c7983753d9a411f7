"""A load's parts made in memory (batch_parts.py) equal what runs_parts.py's SQL makes of the same rows stored, and
the fold merges them in place of reading the tail's spans back, with the same kept runs; without the whole tail
in memory (a restart, too much held) it reads the spans, and answers the same."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest
from runs_data import assert_kept_tables_match_the_view, assert_runs_match_the_view, in_requests, random_store

from lousho.observe.runs import batch_parts, runs_fold
from lousho.observe.runs import runs_parts as p
from lousho.observe.store.span_store import SCORE_SCHEMA, SPAN_SCHEMA, SpanStore


def _tables(spans: list[dict], scores: list[dict]) -> tuple[pa.Table, pa.Table]:
    return (pa.Table.from_pylist(spans, schema=SPAN_SCHEMA), pa.Table.from_pylist(scores, schema=SCORE_SCHEMA))


def _normal(value: object) -> object:
    # Lists and sets may hold their values in any order (the SQL's list() and list_distinct() do too).
    if isinstance(value, list):
        return sorted((_normal(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _by_key(table: pa.Table, keys: list[str]) -> dict[tuple, dict]:
    rows = [{k: _normal(v) for k, v in row.items()} for row in table.to_pylist()]
    by_key = {tuple(row[k] for k in keys): row for row in rows}
    assert len(by_key) == len(rows), "one row per key"
    return by_key


def _sql_parts(spans: pa.Table, scores: pa.Table) -> tuple[pa.Table, pa.Table]:
    con = duckdb.connect()
    con.register("span_arrow", spans)
    con.register("score_arrow", scores)
    con.execute("CREATE TABLE spans AS SELECT * FROM span_arrow")
    con.execute("CREATE TABLE scores AS SELECT * FROM score_arrow")
    trace = con.sql(p.trace_batch("spans", "scores")).to_arrow_table()
    attempt = con.sql(p.attempt_batch("spans")).to_arrow_table()
    return trace, attempt


def _assert_parts_equal_the_sql(spans: list[dict], scores: list[dict]) -> None:
    span_table, score_table = _tables(spans, scores)
    made = batch_parts.batch_parts(span_table, score_table)
    assert made.trace.schema == batch_parts.TRACE_SCHEMA and made.attempt.schema == batch_parts.ATTEMPT_SCHEMA
    trace, attempt = _sql_parts(span_table, score_table)
    assert _by_key(made.trace, p.TRACE_KEYS) == _by_key(trace.select(made.trace.schema.names), p.TRACE_KEYS)
    assert _by_key(made.attempt, p.ATTEMPT_KEYS) == _by_key(attempt.select(made.attempt.schema.names),
                                                            p.ATTEMPT_KEYS)


def _with_edge_names(rng: random.Random, spans: list[dict]) -> list[dict]:
    """Span names the parts look into: LlamaIndex's request-building span beside its chat call, a workflow's run
    class (an agent hint), names that are neither."""
    names = ("Agent._prepare_chat_with_tools", "FunctionAgent.run", "Workflow.arun", "lower.run", "A.b.run",
             "FunctionAgent.running", "coder")
    for row in spans:
        if rng.random() < 0.3:
            row["name"] = rng.choice(names)
    return spans


@pytest.mark.parametrize("seed", range(8))
def test_a_load_s_parts_made_in_memory_equal_the_sql_s_over_the_same_rows(seed):
    rng = random.Random(seed)
    spans, scores = random_store(seed, traces=rng.choice((1, 5, 60)))
    spans = _with_edge_names(rng, spans)
    _assert_parts_equal_the_sql(spans, scores)
    # A load holding some of a trace's spans only, and scores whose spans came in another load.
    kept = set(rng.sample(range(len(spans)), len(spans) // 2))
    _assert_parts_equal_the_sql([s for i, s in enumerate(spans) if i in kept], scores)


def test_parts_of_loads_with_one_span_a_run_with_no_spans_or_with_scores_only_equal_the_sql():
    spans, scores = random_store(3, traces=40)
    # Every span a trace and a run of its own (the shape the runs-per-span benchmark sends).
    roots = [dict(s, trace_id=f"{i:032x}", key_lo=i, parent_span_id=None, run_id=f"r{i}", operation="invoke_agent")
             for i, s in enumerate(spans)]
    _assert_parts_equal_the_sql(roots, [])
    _assert_parts_equal_the_sql([], scores)
    _assert_parts_equal_the_sql([], [])


@pytest.mark.parametrize("seed", range(3))
def test_the_fold_merges_parts_made_from_the_loads_in_memory_and_keeps_the_view_s_runs(tmp_path, seed):
    spans, scores = random_store(seed)
    rng = random.Random(seed)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    folds = 0
    for request in in_requests(rng, spans, scores, count=8):
        store.append([request])
        if rng.random() < 0.5:
            folds += store.fold() > 0
            assert_kept_tables_match_the_view(con)
    folds += store.fold() > 0
    assert_kept_tables_match_the_view(con)
    assert_runs_match_the_view(con)
    # Every fold past the store's first (which builds the kept tables from the spans) took its tail from memory.
    assert store._fold.folds_from_memory == folds - 1 > 0  # noqa: SLF001
    store.close()


def test_a_tail_not_all_in_memory_is_read_back_from_the_store_with_the_same_runs(tmp_path, monkeypatch):
    spans, scores = random_store(5)
    requests = in_requests(random.Random(5), spans, scores, count=6)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    store.append(requests[:1])
    store.fold()  # the store's first fold builds the kept tables from the spans
    store.append(requests[1:3])
    store.fold()
    assert store._fold.folds_from_memory == 1  # noqa: SLF001
    # Past the bound held in memory the rows held are let go: the fold reads its tail back.
    monkeypatch.setattr(runs_fold, "HELD_MAX_BYTES", 1)
    for request in requests[3:]:
        store.append([request])
    assert store.fold() > 0
    assert store._fold.folds_from_memory == 1  # noqa: SLF001
    assert_kept_tables_match_the_view(con)
    assert_runs_match_the_view(con)
    store.close()
