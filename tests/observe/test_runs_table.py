"""``runs`` and ``sessions`` answer exactly what the runs view's definition gives on the same spans, whatever
part of them is folded into the kept tables: none, all, or any point between, however the spans arrive (split
over requests, out of order, re-sent, across a restart, or stored by an older lousho before the tables existed)."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest
from runs_data import (
    assert_kept_tables_match_the_view,
    assert_picked_sessions_match_the_view,
    assert_runs_match_the_view,
    decoded,
    in_requests,
    random_store,
    rows_of,
    unfolded,
)

from lousho.observe.decode.otlp_decode import SCORE_FIELDS, SPAN_FIELDS
from lousho.observe.runs import runs_table
from lousho.observe.store import schema
from lousho.observe.store.span_store import SCORE_SCHEMA, SPAN_SCHEMA, SpanStore


@pytest.mark.parametrize("seed", range(6))
def test_runs_over_requests_in_any_order_equal_the_view_at_every_fold_point(tmp_path, seed):
    spans, scores = random_store(seed)
    rng = random.Random(seed)
    requests = in_requests(rng, spans, scores, count=rng.randint(4, 12))
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    for number, request in enumerate(requests):
        store.append([request])
        # The first checks a store that is all tail (nothing folded yet), the later ones a tail over kept runs.
        assert (unfolded(con) == con.execute("SELECT count(*) FROM spans").fetchall()[0][0]) == (number < 2)
        assert_runs_match_the_view(con)
        if number == 1 or (number > 1 and rng.random() < 0.4):
            store.fold()
            assert_kept_tables_match_the_view(con)
            assert_runs_match_the_view(con)
    store.fold()
    assert_kept_tables_match_the_view(con)
    store.close()


def test_a_page_of_sessions_picked_before_its_run_ids_are_made_is_the_view_s_page(tmp_path):
    # The page and ``lousho sessions`` pick their sessions, then make those sessions' run ids from ``runs``
    # (sessions_view.picked_sessions_select): with a tail over kept sessions and without one, the view's page.
    spans, scores = random_store(7)
    rng = random.Random(7)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    for number, request in enumerate(in_requests(rng, spans, scores, count=6)):
        store.append([request])
        if number % 2:
            assert_picked_sessions_match_the_view(con)
            store.fold()
    assert_picked_sessions_match_the_view(con)
    store.close()


@pytest.mark.parametrize("share", [0.0, float("inf")], ids=["keys-of-one-row-apart", "all-aggregated"])
@pytest.mark.parametrize("seed", range(3))
def test_the_fold_answers_the_view_whichever_way_it_aggregates_its_tail(tmp_path, monkeypatch, share, seed):
    # The fold takes the keys of one row apart when the tail's shape favours it (runs_table.one_apart_steps):
    # forced one way and the other over the same random spans, both give the view's answer.
    monkeypatch.setattr(runs_table, "ONE_APART_SHARE", share)
    spans, scores = random_store(100 + seed)
    rng = random.Random(seed)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    for number, request in enumerate(in_requests(rng, spans, scores, count=rng.randint(4, 8))):
        store.append([request])
        if number:  # the first fold builds the kept tables whole; the later ones fold a tail
            store.fold()
            assert_kept_tables_match_the_view(con)
    assert_runs_match_the_view(con)
    store.close()


def test_the_fold_takes_the_keys_of_one_row_apart_when_most_keys_have_one(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE tail_spans (trace_id VARCHAR, run_id VARCHAR)")
    # a run on every span: each trace and each attempt one row
    con.execute("INSERT INTO tail_spans SELECT 't' || i, 'r' || i FROM range(100) t(i)")
    assert runs_table.one_apart_steps(con) == {"tail_trace", "tail_attempt"}
    # traces of four spans, the root alone carrying the run id
    con.execute("DELETE FROM tail_spans")
    con.execute("INSERT INTO tail_spans "
                "SELECT 't' || (i // 4), CASE WHEN i % 4 = 0 THEN 'r' || i END FROM range(400) t(i)")
    assert runs_table.one_apart_steps(con) == {"tail_attempt"}
    # every span of a trace carrying its run id
    con.execute("UPDATE tail_spans SET run_id = 'r-' || trace_id")
    assert runs_table.one_apart_steps(con) == set()
    con.execute("DELETE FROM tail_spans")
    assert runs_table.one_apart_steps(con) == set()


def test_runs_in_one_group_commit_equal_the_view_before_and_after_the_fold(tmp_path):
    spans, scores = random_store(11)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    store.append(in_requests(random.Random(11), spans, scores, count=5))
    con = store.reader()
    assert unfolded(con) == len(spans)
    assert_runs_match_the_view(con)
    assert store.fold() == len(spans)
    assert_kept_tables_match_the_view(con)
    assert_runs_match_the_view(con)
    store.close()


@pytest.mark.parametrize("runs", ["shared", "new"])
def test_a_tail_of_new_traces_over_kept_runs_folds_to_the_view_s_answer(tmp_path, runs):
    """The fold copies only the kept parts the tail touches (found by their keys first): with none of the tail's
    traces kept, and its runs either among the kept ones ("shared") or all new, the kept tables still equal
    the view."""
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    con = store.reader()
    first, first_scores = random_store(31)
    store.append(in_requests(random.Random(31), first, first_scores, count=2))
    store.fold()
    later, later_scores = random_store(32)  # other trace ids; the same pool of run ids
    if runs == "new":
        for row in (*later, *later_scores):
            row["run_id"] = row["run_id"] and f"{row['run_id']}-later"
    assert not {row["trace_id"] for row in later} & {row["trace_id"] for row in first}
    for request in in_requests(random.Random(32), later, later_scores, count=3):
        store.append([request])
        assert_runs_match_the_view(con)
        store.fold()
        assert_kept_tables_match_the_view(con)
        assert_runs_match_the_view(con)
    store.close()


def test_a_run_spread_over_kept_and_unfolded_spans_and_its_resumed_trace(tmp_path):
    """A run's first trace is folded; more of its spans, its score and a resumed attempt (a new trace) are
    not yet: the run's row is recomputed from both, and its session with it."""
    spans, scores = random_store(51, traces=1)
    base = dict(spans[0], run_id="run-r", conversation_id="conv-r", parent_span_id=None, operation="invoke_agent",
                status_code="OK", input_tokens=10, cost_usd=0.5)
    trace = base["trace_id"]
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    store.append([decoded([base], [])])
    store.fold()
    con = store.reader()
    assert con.execute("SELECT run_id, attempts, input_tokens FROM runs").fetchall() == [("run-r", 1, 10)]

    def child(span_id: int, trace_id: str, offset: int, **fields) -> dict:
        return base | {"span_id": f"{span_id:016x}", "key_hi": span_id, "trace_id": trace_id,
                       "key_lo": int(trace_id[16:], 16), "start_ns": base["start_ns"] + offset,
                       "end_ns": base["end_ns"] + offset} | fields

    more = child(0xA1, trace, 1, parent_span_id=base["span_id"], run_id=None, operation="chat", input_tokens=7)
    resumed = "f" * 16 + trace[16:]
    attempt = child(0xA2, resumed, 10**7, status_code="ERROR", error_type="timeout", input_tokens=3)
    score = {f: None for f in SCORE_FIELDS} | {
        "key_hi": 0xA1, "key_lo": more["key_lo"], "seq": 0, "trace_id": trace, "span_id": more["span_id"],
        "passed": False, "time_ns": more["end_ns"], "attributes": "{}"}
    store.append([decoded([more], [score])])
    store.append([decoded([attempt], [])])
    assert unfolded(con) == 2
    assert con.execute("SELECT run_id, attempts, input_tokens, status, passed, error_type, last_trace_id FROM runs"
                       ).fetchall() == [("run-r", 2, 20, "error", False, "timeout", resumed)]
    assert con.execute("SELECT session_id, turns, failed, input_tokens FROM sessions").fetchall() == \
        [("conv-r", 1, 1, 20)]
    assert_runs_match_the_view(con)
    store.fold()
    assert_kept_tables_match_the_view(con)
    store.close()


def test_a_resent_span_counts_once_in_runs_across_requests_and_a_restart(tmp_path):
    spans, scores = random_store(21, traces=20)
    path = tmp_path / "s.duckdb"
    store = SpanStore(path, fold_thread=False)
    requests = in_requests(random.Random(21), spans, scores, count=4)
    for request in requests[:2]:
        store.append([request])
    store.fold()
    for request in requests[2:]:
        store.append([request])
    once = rows_of(store.reader(), "SELECT * FROM runs", "run_id")
    # The same request twice in one group commit, then again after a restart.
    assert store.append([requests[0], requests[0]]).inserted == 0
    store.close()
    store = SpanStore(path, fold_thread=False)
    for request in requests:
        assert store.append([request]).duplicates == request.span_count
    con = store.reader()
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(len(spans),)]
    assert con.execute("SELECT count(*) FROM scores").fetchall() == [(len(scores),)]
    assert rows_of(con, "SELECT * FROM runs", "run_id") == once
    assert_kept_tables_match_the_view(con)  # the restart folded everything
    store.close()


def test_a_trace_becomes_part_of_a_run_when_its_run_id_span_arrives_after_the_fold(tmp_path):
    """A trace first seen without a run id is a run of its own; once a span carrying a run id arrives,
    that implicit run is gone and the trace belongs to the named run, folded or not."""
    spans, scores = random_store(31, traces=1)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    root = dict(spans[0], run_id=None, operation="invoke_agent", call_id="call-1", parent_span_id=None)
    store.append([decoded([root], [])])
    store.fold()
    con = store.reader()
    assert con.execute("SELECT run_id, implicit FROM runs").fetchall() == [("call-1", True)]
    child = dict(root, span_id="00000000000000ab", key_hi=0xAB, parent_span_id=root["span_id"], run_id="run-x",
                 start_ns=root["start_ns"] + 1, end_ns=root["end_ns"] + 1, call_id=None)
    store.append([decoded([child], [])])
    assert con.execute("SELECT run_id, implicit FROM runs").fetchall() == [("run-x", False)]
    assert_runs_match_the_view(con)
    store.fold()
    assert con.execute("SELECT run_id, implicit FROM kept_runs").fetchall() == [("run-x", False)]
    store.close()


def _write_as_schema_2(path, spans: list[dict], scores: list[dict]) -> None:
    """A store as lousho wrote it before the kept tables: migrations 1 and 2 only, rows inserted plainly."""
    con = duckdb.connect(str(path))
    con.execute(schema._VERSION_TABLE)
    for number, (description, statements) in enumerate(schema.MIGRATIONS[:2], start=1):
        for statement in statements:
            con.execute(statement)
        con.execute("INSERT INTO lousho_schema (version, description) VALUES (?, ?)", [number, description])
    batch = decoded(spans, scores)
    con.register("span_batch", pa.table(batch.spans, schema=SPAN_SCHEMA))
    con.register("score_batch", pa.table(batch.scores, schema=SCORE_SCHEMA))
    key = "((key_hi::UHUGEINT << 64) | key_lo::UHUGEINT)"
    # Migration 6 added the revision columns.
    span_columns = [f for f in SPAN_FIELDS if f not in ("key_hi", "key_lo", "fingerprint", "revision_source")]
    # The table of migration 2 holds the resource itself (migration 5 moved it to its own table).
    values = ["'{}' AS resource" if f == "resource_key" else f for f in span_columns]
    span_columns = ["resource" if f == "resource_key" else f for f in span_columns]
    score_columns = [f for f in SCORE_FIELDS if f not in ("key_hi", "key_lo")]
    con.execute(f"INSERT INTO spans (span_key, {', '.join(span_columns)}, duration_ns, received_ns) "
                f"SELECT {key}, {', '.join(values)}, end_ns - start_ns, 0 FROM span_batch")
    con.execute(f"INSERT INTO scores (span_key, {', '.join(score_columns)}) "
                f"SELECT {key}, {', '.join(score_columns)} FROM score_batch")
    con.close()


def test_a_store_of_the_previous_schema_gets_its_kept_runs_built_on_open(tmp_path):
    spans, scores = random_store(41)
    path = tmp_path / "s.duckdb"
    half = len(spans) // 2
    first = {r["span_id"] for r in spans[:half]}
    _write_as_schema_2(path, spans[:half], [s for s in scores if s["span_id"] in first])
    store = SpanStore(path, fold_thread=False)
    con = store.reader()
    assert schema.current_version(con) == schema.SCHEMA_VERSION
    assert_kept_tables_match_the_view(con)
    assert_runs_match_the_view(con)
    # and it keeps them from there on
    store.append([decoded(spans[half:], [s for s in scores if s["span_id"] not in first])])
    assert_runs_match_the_view(con)
    store.fold()
    assert_kept_tables_match_the_view(con)
    store.close()
