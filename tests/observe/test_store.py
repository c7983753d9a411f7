"""The store's schema: versioned, migrated append-only, refused when newer; the runs view's meaning."""

from __future__ import annotations

import os

import duckdb
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from otlp_bodies import NS, chat_span, kv, new_ids, request
from tests_support import run_root

from lousho.observe import connect
from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.errors import SchemaTooNew, StoreCorrupt, StoreMissing
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore, open_read_only


def test_a_new_store_is_at_the_current_schema_version(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb")
    con = store.reader()
    assert schema.current_version(con) == schema.SCHEMA_VERSION == len(schema.MIGRATIONS)
    rows = con.execute("SELECT version, description FROM lousho_schema ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, schema.SCHEMA_VERSION + 1))
    store.close()


class _Recording:
    """A DuckDB connection that keeps the statements it is given."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.statements = con, []

    def execute(self, statement: str, *params):
        self.statements.append(statement)
        return self.con.execute(statement, *params)


def test_a_new_store_binds_the_runs_and_sessions_views_once_however_many_migrations_make_them(tmp_path):
    # Three migrations rebuild the kept tables and their views; each binding costs about 30 ms, paid by every new
    # store (hundreds in this suite): only the last makes the views, which the store then answers with.
    con = _Recording(duckdb.connect(str(tmp_path / "s.duckdb")))
    assert schema.migrate(con) == schema.SCHEMA_VERSION
    views = ("CREATE OR REPLACE VIEW runs ", "CREATE OR REPLACE VIEW sessions ")
    made = [statement for statement in con.statements if statement.startswith(views)]
    assert len(made) == 2
    con.con.close()
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    trace, root = new_ids()
    store.append([decode_request(request([run_root(trace, root, "run-1", start=NS)]))])
    assert store.reader().execute("SELECT run_id FROM runs").fetchall() == [("run-1",)]
    assert store.reader().execute("SELECT count(*) FROM sessions").fetchall() == [(0,)]
    store.close()


def test_reopening_applies_no_migration_twice_and_keeps_data(tmp_path):
    path = tmp_path / "s.duckdb"
    store = SpanStore(path)
    store.append([decode_request(request([chat_span(*new_ids())]))])
    store.close()
    store = SpanStore(path)
    con = store.reader()
    assert con.execute("SELECT count(*) FROM lousho_schema").fetchall() == [(schema.SCHEMA_VERSION,)]
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(1,)]
    store.close()


def _kept_indexes(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [name for (name,) in con.execute(
        "SELECT index_name FROM duckdb_indexes() WHERE table_name IN ('kept_runs', 'kept_sessions')").fetchall()]


def test_the_kept_runs_lose_the_indexes_an_older_store_made_and_keep_their_rows(tmp_path):
    # An index on the kept runs cost a tenth of each fold (their upkeep at its commit): a new store makes none,
    # and a store that ran the migrations which made them drops them.
    path = tmp_path / "s.duckdb"
    store = SpanStore(path)
    assert _kept_indexes(store.reader()) == []
    trace, root = new_ids()
    span = run_root(trace, root, "run-1", start=NS)
    span.attributes.append(kv("gen_ai.conversation.id", "conv-1"))
    store.append([decode_request(request([span]))])
    assert store.fold() == 1
    store.close()
    con = duckdb.connect(str(path))
    con.execute("CREATE INDEX kept_runs_run_id ON kept_runs (run_id)")
    con.execute("CREATE INDEX kept_sessions_session_id ON kept_sessions (session_id)")
    for statement in schema.MIGRATIONS[9][1]:  # migration 10 itself: the indexes go, the rows stay
        con.execute(statement)
    assert _kept_indexes(con) == [] and con.execute("SELECT count(*) FROM kept_runs").fetchall() == [(1,)]
    con.execute("CREATE INDEX kept_runs_run_id ON kept_runs (run_id)")
    con.execute("DELETE FROM lousho_schema WHERE version >= 10")  # and a store from before it, upgraded whole
    con.close()
    store = SpanStore(path)
    reader = store.reader()
    assert schema.current_version(reader) == schema.SCHEMA_VERSION
    assert _kept_indexes(reader) == []
    assert reader.execute("SELECT run_id FROM runs").fetchall() == [("run-1",)]
    assert reader.execute("SELECT session_id, turns FROM sessions").fetchall() == [("conv-1", 1)]
    store.close()


def _kept_session_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [d[0] for d in con.execute("SELECT * FROM kept_sessions LIMIT 0").description]


def _session_run(store: SpanStore, run_id: str, conversation: str | None, start: int) -> None:
    trace, root = new_ids()
    span = run_root(trace, root, run_id, start=start)
    if conversation:
        span.attributes.append(kv("gen_ai.conversation.id", conversation))
    store.append([decode_request(request([span]))])


def test_no_kept_session_holds_its_run_ids_and_an_older_store_loses_them_keeping_the_answer(tmp_path):
    # A fold rewrote every touched session's list of all its runs, a cost growing with the store: the view makes
    # the lists from the runs, a new store keeps none, and one from before migration 11 drops them.
    path = tmp_path / "s.duckdb"
    store = SpanStore(path, fold_thread=False)
    _session_run(store, "run-late", "conv-1", NS + 5_000)
    _session_run(store, "run-other", "conv-2", NS + 1_000)
    _session_run(store, "run-alone", None, NS + 2_000)
    store.fold()
    _session_run(store, "run-early", "conv-1", NS)  # unfolded, and the first of its session
    reader = store.reader()
    assert "run_ids" not in _kept_session_columns(reader)
    answer = [("conv-1", ["run-early", "run-late"], 2), ("conv-2", ["run-other"], 1)]
    assert reader.execute("SELECT session_id, run_ids, turns FROM sessions ORDER BY 1").fetchall() == answer
    store.fold()
    assert reader.execute("SELECT session_id, run_ids, turns FROM sessions ORDER BY 1").fetchall() == answer
    # A query reading no run ids does not read the kept runs to make them: DuckDB drops the join of the lists.
    scans = [reader.execute(f"EXPLAIN SELECT {columns} FROM sessions").fetchall()[0][1].count("kept_runs")
             for columns in ("count(*), sum(turns), avg(pass_rate)", "run_ids")]
    assert scans[0] == scans[1] - 1
    store.close()
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE kept_sessions ADD COLUMN run_ids VARCHAR[]")
    con.execute("UPDATE kept_sessions SET run_ids = ['stale']")
    # A mark a refold would erase: the upgrade keeps the kept rows (10 million spans took minutes to fold again).
    con.execute("UPDATE kept_runs SET agent = 'kept-as-it-was' WHERE run_id = 'run-other'")
    con.execute("DELETE FROM lousho_schema WHERE version >= 11")
    con.close()
    store = SpanStore(path, fold_thread=False)
    reader = store.reader()
    assert schema.current_version(reader) == schema.SCHEMA_VERSION
    assert "run_ids" not in _kept_session_columns(reader)
    assert reader.execute("SELECT session_id, run_ids, turns FROM sessions ORDER BY 1").fetchall() == answer
    assert reader.execute("SELECT agent FROM runs WHERE run_id = 'run-other'").fetchall() == [("kept-as-it-was",)]
    store.close()


def test_a_store_from_a_newer_lousho_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "s.duckdb"
    SpanStore(path).close()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO lousho_schema (version, description) VALUES (999, 'from the future')")
    con.close()
    with pytest.raises(SchemaTooNew) as err:
        SpanStore(path)
    assert err.value.code == "LOUSHO_STORE_SCHEMA_TOO_NEW" and err.value.hint
    with pytest.raises(SchemaTooNew):
        open_read_only(path)


def test_opening_a_missing_file_read_only_says_how_to_create_it(tmp_path):
    with pytest.raises(StoreMissing) as err:
        connect(tmp_path / "nope.duckdb")
    assert "lousho observe" in err.value.hint
    assert not (tmp_path / "nope.duckdb").exists()


def test_runs_view_joins_attempts_and_takes_the_last_attempts_verdict(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb")
    # Attempt 1 errors after one model call; attempt 2 (a resume: new trace, same run id) passes.
    t1, r1 = new_ids()
    first = run_root(t1, r1, "run-1", start=NS, status=Status.STATUS_CODE_ERROR, error_type="timeout",
                     harness="rev-1")
    t2, r2 = new_ids()
    second = run_root(t2, r2, "run-1", start=NS + 10**9, harness="rev-2", verdict="pass")
    spans = [first, chat_span(t1, new_ids()[1], parent=r1), second, chat_span(t2, new_ids()[1], parent=r2),
             chat_span(t2, new_ids()[1], parent=r2)]
    # A heal fork of another run, made by a probe, failing its check.
    t3, r3 = new_ids()
    fork = run_root(t3, r3, "run-2.heal", start=NS, verdict="fail", probe=True)
    fork.attributes.append(kv("lousho.run.healed_from", "run-2"))
    spans.append(fork)
    store.append([decode_request(request(spans))])
    rows = store.reader().execute(
        "SELECT run_id, attempts, status, passed, harness_revision, input_tokens, model_calls, error_type, "
        "probe, healed_from FROM runs ORDER BY run_id").fetchall()
    assert rows == [
        ("run-1", 2, "ok", True, "rev-2", 360, 3, None, False, None),
        ("run-2.heal", 1, "ok", False, None, None, 0, None, True, "run-2"),
    ]
    store.close()


def test_a_bare_chat_span_without_lousho_attributes_is_a_run_of_one_call(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb")
    trace_id, span_id = new_ids()
    store.append([decode_request(request([chat_span(trace_id, span_id)], service="svc"))])
    rows = store.reader().execute("SELECT run_id, agent, model_calls, implicit FROM runs").fetchall()
    assert rows == [(trace_id.hex(), "svc", 1, True)]
    store.close()


def test_spans_table_promotes_every_column_the_design_names(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb")
    columns = {r[0] for r in store.reader().execute("DESCRIBE spans").fetchall()}
    store.close()
    assert {
        "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns", "duration_ns",
        "status_code", "status_message", "service_name", "scope_name", "operation", "agent_name", "provider",
        "request_model", "response_model", "tool_name", "conversation_id", "input_tokens", "output_tokens",
        "cost_usd", "error_type", "run_id", "harness_revision", "case_id", "probe", "attributes", "resource",
        "events", "links",
    } <= columns




def test_a_store_whose_data_blocks_are_cut_off_is_refused_with_its_path(tmp_path):
    path = tmp_path / "s.duckdb"
    store = SpanStore(path)
    trace_id = new_ids()[0]
    store.append([decode_request(request([chat_span(trace_id, new_ids()[1], **{"gen_ai.input.messages": "x" * 300})
                                          for _ in range(5000)]))])
    store.checkpoint()
    store.close()
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(StoreCorrupt) as err:
        SpanStore(path)
    assert err.value.code == "LOUSHO_STORE_CORRUPT" and str(path) in err.value.hint


def test_values_no_column_can_hold_are_null_and_counted_never_an_error(tmp_path):
    trace_id, span_id = new_ids()
    span = chat_span(trace_id, span_id, **{"gen_ai.usage.input_tokens": "9" * 30, "lousho.cost.usd": float("nan")})
    event = span.events.add(name="gen_ai.evaluation.result", time_unix_nano=2**63)
    event.attributes.append(kv("gen_ai.evaluation.score.value", float("-inf")))
    decoded = decode_request(request([span]))
    assert decoded.nulled == 4 and decoded.rejected == 0
    store = SpanStore(tmp_path / "s.duckdb")
    assert store.append([decoded]).inserted == 1
    con = store.reader()
    assert con.execute("SELECT input_tokens, cost_usd FROM spans").fetchall() == [(None, None)]
    assert con.execute("SELECT score_value, time_ns FROM scores").fetchall() == [(None, NS + 5_000_000)]
    store.close()
