"""Every JSON body the daemon reads (OTLP/JSON on /v1/traces, the /v1/sql request) answers text that is not
valid Unicode and nesting past its limit with a coded 400, or refuses just the span that holds it; never a
500, and the daemon keeps serving."""

from __future__ import annotations

import json

import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode.otlp_decode import MAX_JSON_DEPTH
from lousho.observe.receive.http_app import SQL_MAX_JSON_DEPTH

JSON = "application/json"
SURROGATE = "\ud800"


def _still_serving(url: str) -> None:
    assert get(url, "/healthz").status == 200
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id)]).SerializeToString()
    assert post(url, "/v1/traces", body, "application/x-protobuf").status == 200
    assert sql(url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [{"n": 1}]


def _body(doc: dict) -> bytes:
    """json.dumps writes a lone surrogate as its escape, as a client's encoder does."""
    return json.dumps(doc).encode()


def _spans(*spans: dict) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]},
                               "scopeSpans": [{"scope": {"name": "sc"}, "spans": list(spans)}]}]}


def _span(trace_id: bytes, name: str, **fields) -> dict:
    return {"traceId": trace_id.hex(), "spanId": new_ids()[1].hex(), "name": name, "startTimeUnixNano": "1",
            "endTimeUnixNano": "2", **fields}


_IN_A_SPAN = {
    "span key": {SURROGATE: 1},
    "event key": {"events": [{"name": "e", "timeUnixNano": "1", SURROGATE: 1}]},
    "event attribute key": {"events": [{"name": "e", "attributes": [{"key": "k", "value": {"stringValue": "v"},
                                                                     SURROGATE: 1}]}]},
    "link key": {"links": [{"traceId": "01" * 16, "spanId": "01" * 8, SURROGATE: 1}]},
    "attribute key": {"attributes": [{"key": "k", "value": {"stringValue": "v"}, SURROGATE: 1}]},
    "value key": {"attributes": [{"key": "k", "value": {SURROGATE: 1}}]},
    "kvlist key": {"attributes": [{"key": "k", "value": {"kvlistValue": {"values": [
        {"key": "in", "value": {"intValue": "1", SURROGATE: 2}}]}}}]},
    "status key": {"status": {"code": 2, SURROGATE: 1}},
    "kind name": {"kind": SURROGATE},
    "status code name": {"status": {"code": SURROGATE}},
    "double": {"attributes": [{"key": "k", "value": {"doubleValue": SURROGATE}}]},
    "string": {"attributes": [{"key": "k", "value": {"stringValue": "a" + SURROGATE}}]},
}


@pytest.mark.system
@pytest.mark.parametrize("fields", _IN_A_SPAN.values(), ids=_IN_A_SPAN.keys())
def test_a_lone_surrogate_anywhere_in_a_span_rejects_that_span_alone(shared_daemon, fields):
    trace_id, _ = new_ids()
    body = _body(_spans(_span(trace_id, "good"), _span(trace_id, "bad", **fields)))
    reply = post(shared_daemon.url, "/v1/traces", body, JSON)
    assert reply.status == 200, reply.body
    partial = reply.json()["partialSuccess"]
    assert partial["rejectedSpans"] in ("1", 1)
    message = partial["errorMessage"]
    assert message.startswith("span 'bad': text '") and message.endswith("\\ud800' is not valid Unicode (a lone "
                                                                          "surrogate)"), message
    assert sql(shared_daemon.url, "SELECT name FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"name": "good"}]


_IN_THE_REQUEST = {
    "resource key": {"resource": {SURROGATE: 1}},
    "resource attribute key": {"resource": {"attributes": [{"key": "k", "value": {"stringValue": "v"},
                                                            SURROGATE: 1}]}},
    "resource value key": {"resource": {"attributes": [{"key": "k", "value": {SURROGATE: 1}}]}},
    "scope key": {"scope": {"name": "sc", SURROGATE: 1}},
    "scope attribute key": {"scope": {"attributes": [{"key": "k", "value": {"boolValue": True}, SURROGATE: 1}]}},
}


@pytest.mark.system
@pytest.mark.parametrize("part", _IN_THE_REQUEST.values(), ids=_IN_THE_REQUEST.keys())
def test_a_lone_surrogate_in_the_resource_or_scope_gets_a_coded_400(shared_daemon, part):
    trace_id, _ = new_ids()
    doc = _spans(_span(trace_id, "good"))
    rs = doc["resourceSpans"][0]
    if "resource" in part:
        rs["resource"] = part["resource"]
    else:
        rs["scopeSpans"][0]["scope"] = part["scope"]
    reply = post(shared_daemon.url, "/v1/traces", _body(doc), JSON)
    assert reply.status == 400, reply.body
    assert reply.headers["content-type"] == JSON
    status = reply.json()
    assert status["code"] == 3 and status["message"].startswith("LOUSHO_OBSERVE_BAD_PAYLOAD: ")
    assert "'\\ud800' is not valid Unicode" in status["message"]
    _still_serving(shared_daemon.url)


def _nested(depth: int) -> bytes:
    """An OTLP/JSON body nesting ``depth`` arrays and objects: a span (7 levels down) with an unknown field, which
    the decoders ignore, nesting the rest."""
    trace_id, span_id = new_ids()
    inner = depth - 7
    span = {"traceId": trace_id.hex(), "spanId": span_id.hex(), "name": "deep", "future": "NESTED"}
    return _body(_spans(span)).replace(b'"NESTED"', b"[" * inner + b"1" + b"]" * inner)


@pytest.mark.system
def test_json_nested_past_the_limit_gets_a_coded_400_on_every_json_endpoint(shared_daemon):
    url = shared_daemon.url
    assert post(url, "/v1/traces", _nested(MAX_JSON_DEPTH), JSON).status == 200
    for depth in (MAX_JSON_DEPTH + 1, 500, 100_000):
        reply = post(url, "/v1/traces", _nested(depth), JSON)
        assert reply.status == 400, (depth, reply.body)
        assert reply.json() == {"code": 3, "message": "LOUSHO_OBSERVE_BAD_PAYLOAD: the body nests arrays and "
                                                      f"objects more than {MAX_JSON_DEPTH} deep"}
    for depth in (SQL_MAX_JSON_DEPTH + 1, 100_000):
        inner = depth - 2
        body = b'{"query": "SELECT ? AS x", "params": [' + b"[" * inner + b"1" + b"]" * inner + b"]}"
        reply = post(url, "/v1/sql", body, JSON)
        assert reply.status == 400, (depth, reply.body)
        assert reply.json()["error"]["code"] == "LOUSHO_SQL_BAD_REQUEST"
        assert reply.json()["error"]["message"] == (
            f"the body nests arrays and objects more than {SQL_MAX_JSON_DEPTH} deep")
    inner = SQL_MAX_JSON_DEPTH - 2  # the deepest parameter the limit lets through is answered
    body = b'{"query": "SELECT ? AS x", "params": [' + b"[" * inner + b"1" + b"]" * inner + b"]}"
    reply = post(url, "/v1/sql", body, JSON)
    assert reply.status == 200, reply.body
    assert json.dumps(reply.json()["rows"]) == '[{"x": ' + "[" * inner + "1" + "]" * inner + "}]"
    _still_serving(url)


@pytest.mark.system
@pytest.mark.parametrize("body", [
    {"query": "SELECT '" + SURROGATE + "' AS x"},
    {"query": "SELECT ?::VARCHAR AS x", "params": ["a" + SURROGATE]},
    {"query": "SELECT 1 AS x", SURROGATE: 1},
], ids=["query", "parameter", "key"])
def test_sql_text_that_is_not_valid_unicode_gets_a_coded_400(shared_daemon, body):
    reply = post(shared_daemon.url, "/v1/sql", _body(body), JSON)
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert error["code"] == "LOUSHO_SQL_BAD_REQUEST"
    assert error["message"].startswith("the body holds text that is not valid Unicode (a lone surrogate): ")
    assert error["hint"]
    _still_serving(shared_daemon.url)


@pytest.mark.system
@pytest.mark.parametrize("params", ["x", {"a": 1}, 3], ids=["string", "object", "number"])
def test_sql_params_that_are_not_an_array_are_a_bad_request_not_a_refusal(shared_daemon, params):
    reply = post(shared_daemon.url, "/v1/sql", _body({"query": "SELECT 1 AS x", "params": params}), JSON)
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert error["code"] == "LOUSHO_SQL_BAD_REQUEST"  # it was LOUSHO_SQL_REFUSED, with the read-only hint
    assert error["message"].startswith("params must be a JSON array of values, not ")
