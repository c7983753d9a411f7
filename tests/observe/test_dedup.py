"""A span sent again (same trace_id, span_id) is stored once, with no primary key: the writer's recent-key filter
drops a re-send it holds, compaction removes one it no longer holds, and both count it as a duplicate."""

from __future__ import annotations

import threading
import time

import duckdb
import pyarrow as pa
import pytest
from daemon_support import metric, post, sql
from otlp_bodies import chat_span, kv, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.metrics import Metrics
from lousho.observe.store import schema
from lousho.observe.store import span_store as store_module
from lousho.observe.store.span_store import SpanStore
from lousho.observe.store.writer import Writer

PROTOBUF = "application/x-protobuf"


def _scored_spans(count: int) -> list:
    trace_id, root_id = new_ids()
    spans = [chat_span(trace_id, new_ids()[1], parent=root_id, **{"lousho.run.id": f"run-{trace_id.hex()}"})
             for _ in range(count)]
    event = spans[0].events.add(name="gen_ai.evaluation.result")
    event.attributes.extend([kv("gen_ai.evaluation.name", "t"), kv("gen_ai.evaluation.score.label", "pass")])
    return spans


def _counts(url: str) -> tuple[int, int, int]:
    spans = sql(url, "SELECT count(*) AS n, count(DISTINCT span_key) AS keys FROM spans")[0]
    scores = sql(url, "SELECT count(*) AS n FROM scores")[0]["n"]
    return spans["n"], spans["keys"], scores




@pytest.mark.system
@pytest.mark.slow
def test_requests_grouped_into_one_commit_store_their_shared_spans_once(tmp_path):
    # The commit delay holds the writer while four requests with the same spans queue up: one group commit.
    daemon = start_daemon(tmp_path / "o.duckdb", "--commit-delay", "0.5")
    try:
        body = request(_scored_spans(6)).SerializeToString()
        replies: list[int] = []
        senders = [threading.Thread(target=lambda: replies.append(
            post(daemon.url, "/v1/traces", body, PROTOBUF).status)) for _ in range(4)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(30)
        assert replies == [200] * 4
        assert metric(daemon.url, "lousho_commits_total") < 4, "the requests were not grouped"
        assert _counts(daemon.url) == (6, 6, 1)
        assert metric(daemon.url, "lousho_spans_accepted_total") == 6
        assert metric(daemon.url, "lousho_spans_duplicate_total") == 18
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.slow
def test_a_span_resent_after_a_restart_is_stored_once(tmp_path):
    db = tmp_path / "o.duckdb"
    body = request(_scored_spans(5)).SerializeToString()
    daemon = start_daemon(db)
    try:
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(db)
    try:
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        assert _counts(daemon.url) == (5, 5, 1)
        assert metric(daemon.url, "lousho_spans_duplicate_total") == 5
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.slow
def test_a_resend_older_than_the_filter_is_removed_by_compaction_at_the_next_start(tmp_path):
    db = tmp_path / "o.duckdb"
    old = request(_scored_spans(3)).SerializeToString()
    daemon = start_daemon(db, "--dedup-window", "4")
    try:
        assert post(daemon.url, "/v1/traces", old, PROTOBUF).status == 200
        for _ in range(3):  # pushes the first request's keys out of a 4-key window
            assert post(daemon.url, "/v1/traces", request(_scored_spans(3)).SerializeToString(),
                        PROTOBUF).status == 200
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(db, "--dedup-window", "4")
    try:
        assert post(daemon.url, "/v1/traces", old, PROTOBUF).status == 200
        # Past the window, the re-send is stored again until compaction: ack after commit still holds.
        assert _counts(daemon.url) == (15, 12, 5)
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(db, "--dedup-window", "4")
    try:
        assert _counts(daemon.url) == (12, 12, 4)
        assert metric(daemon.url, "lousho_spans_duplicate_total") == 3
        # The copy was folded into the kept runs before it was removed: they are made again without it.
        calls = "SELECT (SELECT sum(model_calls)::INTEGER FROM runs) AS runs, (SELECT count(*) FROM spans) AS spans"
        assert sql(daemon.url, calls) == [{"runs": 12, "spans": 12}]
    finally:
        assert daemon.stop() == 0


def test_the_writer_compacts_a_copy_past_the_filter_when_idle_and_counts_it(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb", dedup_window=2)
    metrics = Metrics()
    writer = Writer(store, metrics, capacity_bytes=1 << 20, compact_every_s=0.05)
    try:
        first = request(_scored_spans(2))
        for message in (first, request(_scored_spans(2)), first):
            body = message.SerializeToString()
            writer.submit(decode_request(message), len(body), body).result(timeout=10)
            assert writer.wait_loaded(10) == 0  # one load each: the third meets the window, not its own batch
        assert metrics.spans_accepted == 6  # the window held only the second request's keys
        con = store.reader()

        def counts() -> tuple[int, int]:
            return con.execute("SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM scores)").fetchone()

        def seen() -> tuple[tuple[int, int], tuple[int, int]]:
            # The metrics move just after the compaction commits: wait for both, not the table alone.
            return counts(), (metrics.spans_accepted, metrics.spans_duplicate)

        deadline = time.monotonic() + 10
        while seen() != ((4, 2), (4, 2)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen() == ((4, 2), (4, 2))
    finally:
        writer.close(10)
        store.close()


def test_a_store_written_with_primary_keys_opens_without_them_and_keeps_its_spans(tmp_path):
    path = tmp_path / "v2.duckdb"
    spans = _scored_spans(3)
    # A store as the code before migration 4 left it: the keyed tables, filled by INSERT OR IGNORE.
    con = duckdb.connect(str(path))
    con.execute(schema._VERSION_TABLE)
    for number, (description, statements) in enumerate(schema.MIGRATIONS[:3], start=1):
        for statement in statements:
            con.execute(statement)
        con.execute("INSERT INTO lousho_schema (version, description) VALUES (?, ?)", [number, description])
    batch = store_module.arrow_batch(decode_request(request(spans)))
    # That table held each span's resource itself (migration 5 keeps it once, in its own table).
    resources = dict(zip(*batch.resources.to_pydict().values(), strict=True))
    keys = batch.spans.column("resource_key").to_pylist()
    at = batch.spans.schema.get_field_index("resource_key")
    con.register("span_batch", batch.spans.set_column(at, "resource", pa.array([resources[k] for k in keys])))
    con.register("score_batch", batch.scores)
    # Nor had it the columns migration 6 adds.
    old_insert = store_module._INSERT_SPANS.replace("span_rows", "spans").replace("resource_key", "resource")
    for column in (", fingerprint", ", revision_source"):
        old_insert = old_insert.replace(column, "")
    for insert in (old_insert, store_module._INSERT_SCORES):
        con.execute(insert.replace("INSERT INTO", "INSERT OR IGNORE INTO"), [1, 1] if "span_batch" in insert else [1])
    assert con.execute("SELECT count(*) FROM duckdb_constraints() "
                       "WHERE table_name = 'spans' AND constraint_type = 'PRIMARY KEY'").fetchone() == (1,)
    con.close()

    store = SpanStore(path)
    try:
        reader = store.reader()
        assert schema.current_version(reader) == schema.SCHEMA_VERSION
        assert reader.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name IN ('spans', 'scores') "
                              "AND constraint_type = 'PRIMARY KEY'").fetchone() == (0,)
        assert reader.execute("SELECT count(*) FROM spans").fetchone() == (3,)
        assert reader.execute("SELECT DISTINCT resource FROM spans").fetchall() == [(resources[keys[0]],)]
        assert reader.execute("SELECT count(*) FROM scores").fetchone() == (1,)
        # The migrated spans are in the filter: a re-send is still a duplicate.
        assert store.append([decode_request(request(spans))]).duplicates == 3
        assert reader.execute("SELECT count(*) FROM spans").fetchone() == (3,)
    finally:
        store.close()
