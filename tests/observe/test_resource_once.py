"""A resource is kept once per distinct resource, never copied into each span's row (schema migration 5).

One request of a 1 MiB resource attribute on 2,100 spans took 2 GiB of the daemon's memory and got a 500 when
each span carried the resource's JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from daemon_support import post, sql
from otlp_bodies import chat_span, kv, new_ids, request, to_json

from lousho.observe.client.process import start_daemon
from lousho.observe.decode import otlp_decode, otlp_json_native, otlp_native
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore, arrow_batch

BIG = "r" * (1 << 20)
SPANS = 2_100


def _big_resource_request(spans: int = SPANS):
    trace_id, _ = new_ids()
    req = request([chat_span(trace_id, new_ids()[1]) for _ in range(spans)], service="big-resource")
    req.resource_spans[0].resource.attributes.append(kv("big", BIG))
    return req


def _vm_hwm_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.system
def test_a_1_mib_resource_on_2100_spans_is_stored_once_and_costs_the_daemon_little_memory(tmp_path):
    body = _big_resource_request().SerializeToString()
    daemon = start_daemon(tmp_path / "o.duckdb")
    try:
        warm = _big_resource_request(10)  # the store's first insert allocates what later ones reuse
        assert post(daemon.url, "/v1/traces", warm.SerializeToString(), "application/x-protobuf").status == 200
        before = _vm_hwm_bytes(daemon.pid)
        reply = post(daemon.url, "/v1/traces", body, "application/x-protobuf")
        grew = _vm_hwm_bytes(daemon.pid) - before
        assert reply.status == 200, reply.body[:500]
        assert grew < 64 << 20, f"peak memory grew by {grew / 2**20:.0f} MiB for a {len(body) / 2**20:.1f} MiB body"
        # Every span still answers its resource through the spans view.
        rows = sql(daemon.url, "SELECT count(*) AS n, count(resource) AS with_resource, "
                               "min(length(resource)) AS shortest, max(resource = ?) AS same FROM spans",
                   [json.dumps({"service.name": "big-resource", "big": BIG}, separators=(",", ":"))])
        assert rows == [{"n": SPANS + 10, "with_resource": SPANS + 10, "shortest": len(BIG) + 40, "same": True}]
        assert sql(daemon.url, "SELECT count(*) AS n FROM resources") == [{"n": 1}]
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.parametrize("decode", [otlp_decode.decode_protobuf, otlp_native.decode_protobuf],
                         ids=["reference", "native"])
def test_both_decoders_carry_a_shared_resource_once_and_each_span_its_key(decode):
    req = _big_resource_request(50)
    other = req.resource_spans.add()  # the same resource again, and another one
    other.CopyFrom(req.resource_spans[0])
    third = req.resource_spans.add()
    third.CopyFrom(req.resource_spans[0])
    third.resource.attributes[1].value.string_value = "small"
    for copy in (other, third):  # new spans: a span repeating another's ids in one request is refused
        for span in copy.scope_spans[0].spans:
            span.span_id = new_ids()[1]
    batch = arrow_batch(decode(req.SerializeToString()))
    resources = batch.resources.to_pydict()
    assert len(resources["resource_key"]) == 2
    assert resources["resource_key"] == sorted(otlp_decode.resource_key(r) for r in resources["resource"])
    keys = batch.spans.column("resource_key").to_pylist()
    assert len(keys) == 150 and set(keys) == set(resources["resource_key"])
    assert "resource" not in batch.spans.schema.names


def test_an_otlp_json_body_gives_the_same_resource_table_natively_and_by_the_reference():
    body = to_json(_big_resource_request(5))
    native, reference = (arrow_batch(d(body)) for d in (otlp_json_native.decode_json, otlp_decode.decode_json))
    assert native.resources.equals(reference.resources) and native.resources.num_rows == 1
    assert native.spans.column("resource_key").equals(reference.spans.column("resource_key"))


def _store_of_schema_4(path: Path) -> None:
    """A store as the code before migration 5 left it: each span's row holding its resource's JSON."""
    con = duckdb.connect(str(path))
    con.execute(schema._VERSION_TABLE)
    for number, (description, statements) in enumerate(schema.MIGRATIONS[:4], start=1):
        for statement in statements:
            con.execute(statement)
        con.execute("INSERT INTO lousho_schema (version, description) VALUES (?, ?)", [number, description])
    for i, resource in enumerate(('{"service.name":"a"}', '{"service.name":"b"}', '{"service.name":"a"}')):
        con.execute("INSERT INTO spans (span_key, trace_id, span_id, name, kind, start_ns, end_ns, duration_ns, "
                    "status_code, service_name, run_id, resource, received_ns, commit_seq) VALUES "
                    "(?, 't1', ?, 'invoke_agent', 'INTERNAL', 10, 20, 10, 'OK', 'a', ?, ?, 30, 1)",
                    [i + 1, f"s{i}", f"run-{i}", resource])
    con.close()


def test_a_store_of_schema_4_keeps_each_resource_once_and_spans_answers_as_before(tmp_path):
    path = tmp_path / "v4.duckdb"
    _store_of_schema_4(path)
    con = duckdb.connect(str(path))
    old_columns = con.execute("DESCRIBE spans").fetchall()
    con.close()

    store = SpanStore(path)
    try:
        reader = store.reader()
        assert schema.current_version(reader) == schema.SCHEMA_VERSION
        # The same columns in the same order, and after them only those later migrations add (6: the revision's).
        columns = reader.execute("DESCRIBE spans").fetchall()
        assert columns[:len(old_columns)] == old_columns
        assert [c[0] for c in columns[len(old_columns):]] == ["fingerprint", "revision_source"]
        assert reader.execute("SELECT span_id, resource FROM spans ORDER BY span_id").fetchall() == [
            ("s0", '{"service.name":"a"}'), ("s1", '{"service.name":"b"}'), ("s2", '{"service.name":"a"}')]
        assert reader.execute("SELECT count(*) FROM resources").fetchall() == [(2,)]
        assert reader.execute("SELECT count(*) FROM runs").fetchall() == [(3,)]
        # The migration's key is the decoder's: a new span of a stored resource adds no resource row.
        trace_id, span_id = new_ids()
        store.append([otlp_decode.decode_request(request([chat_span(trace_id, span_id)], service="a"))])
        assert reader.execute("SELECT count(*) FROM resources").fetchall() == [(2,)]
        assert reader.execute("SELECT resource FROM spans WHERE span_id = ?", [span_id.hex()]).fetchall() == [
            ('{"service.name":"a"}',)]
    finally:
        store.close()


def test_a_query_that_reads_no_resource_does_not_join_the_resources(tmp_path):
    store = SpanStore(tmp_path / "s.duckdb")
    try:
        plan = store.reader().execute("EXPLAIN SELECT count(*), sum(duration_ns) FROM spans "
                                      "WHERE name = 'x'").fetchall()[0][1]
        assert "JOIN" not in plan.upper() and "resources" not in plan
    finally:
        store.close()


@pytest.mark.system
@pytest.mark.parametrize("where", ["service", "scope"])
def test_a_1_mib_service_or_scope_name_on_2100_spans_is_cut_in_the_rows_and_costs_little_memory(tmp_path, where):
    """service_name and scope_name are copied into every span's row: past 256 characters they are cut there (the
    resource keeps the whole service.name), so a huge name on many spans cannot take gigabytes."""
    def huge(spans: int):
        trace_id, _ = new_ids()
        req = request([chat_span(trace_id, new_ids()[1]) for _ in range(spans)],
                      service=BIG if where == "service" else "svc")
        if where == "scope":
            req.resource_spans[0].scope_spans[0].scope.name = BIG
        return req

    daemon = start_daemon(tmp_path / "o.duckdb")
    try:
        assert post(daemon.url, "/v1/traces", huge(10).SerializeToString(), "application/x-protobuf").status == 200
        before = _vm_hwm_bytes(daemon.pid)
        reply = post(daemon.url, "/v1/traces", huge(SPANS).SerializeToString(), "application/x-protobuf")
        grew = _vm_hwm_bytes(daemon.pid) - before
        assert reply.status == 200, reply.body[:500]
        assert grew < 64 << 20, f"peak memory grew by {grew / 2**20:.0f} MiB"
        column = "service_name" if where == "service" else "scope_name"
        rows = sql(daemon.url, f"SELECT count(*) AS n, max(length({column})) AS longest, "
                               "max(length(resource)) AS resource FROM spans")
        assert rows[0]["n"] == SPANS + 10 and rows[0]["longest"] == otlp_decode.MAX_SHARED_NAME
        if where == "service":
            assert rows[0]["resource"] > len(BIG)  # the whole name, once, in the resource
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


def test_both_decoders_cut_a_long_service_or_scope_name_alike():
    name = "é" * 300 + "x"
    req = request([chat_span(*new_ids())], service=name)
    req.resource_spans[0].scope_spans[0].scope.name = name
    body = req.SerializeToString()
    reference = arrow_batch(otlp_decode.decode_protobuf(body)).spans.to_pydict()
    native = arrow_batch(otlp_native.decode_protobuf(body)).spans.to_pydict()
    assert reference == native
    assert reference["service_name"] == reference["scope_name"] == [name[:otlp_decode.MAX_SHARED_NAME]]
