"""Cross-site and DNS-rebinding requests are refused; exporters, which send no Origin, are not."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from daemon_support import get, post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.receive.http_guard import host_name

QUERY = json.dumps({"query": "SELECT count(*) AS n FROM spans"}).encode()


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    return port


def _error_code(reply) -> str:
    return reply.json()["error"]["code"]


@pytest.mark.system
@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_a_rebinding_page_cannot_read_the_page_or_any_endpoint(shared_daemon, path):
    reply = get(shared_daemon.url, path, host=f"evil.example:{_port(shared_daemon.url)}")
    assert reply.status == 403
    assert _error_code(reply) == "LOUSHO_OBSERVE_FORBIDDEN_HOST"
    assert reply.json()["error"]["hint"]


@pytest.mark.system
def test_a_rebinding_page_cannot_read_prompts_through_sql(shared_daemon):
    reply = post(shared_daemon.url, "/v1/sql", QUERY, "application/json", host="evil.example")
    assert reply.status == 403
    assert _error_code(reply) == "LOUSHO_OBSERVE_FORBIDDEN_HOST"


@pytest.mark.system
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:1"])
def test_a_cross_site_post_is_refused(shared_daemon, origin):
    reply = post(shared_daemon.url, "/v1/sql", QUERY, "application/json", origin=origin)
    assert reply.status == 403
    assert _error_code(reply) == "LOUSHO_OBSERVE_FORBIDDEN_ORIGIN"
    body = request([chat_span(*new_ids())]).SerializeToString()
    reply = post(shared_daemon.url, "/v1/traces", body, "application/x-protobuf", origin=origin)
    assert reply.status == 403


@pytest.mark.system
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST", "127.0.0.2"])
def test_loopback_names_and_the_daemons_own_origin_are_served(shared_daemon, host):
    port = _port(shared_daemon.url)
    own = f"{host}:{port}"
    reply = post(shared_daemon.url, "/v1/sql", QUERY, "application/json", host=own,
                 origin=f"http://{own}")
    assert reply.status == 200, reply.body
    assert get(shared_daemon.url, "/", host=own).status == 200


@pytest.mark.system
def test_exporters_without_origin_still_export(shared_daemon):
    from lousho.observe import instrument

    trace_id, span_id = new_ids()
    provider = instrument("host-origin-test", shared_daemon.url)
    with provider.get_tracer("t").start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
        pass
    provider.shutdown()
    reply = post(shared_daemon.url, "/v1/sql", json.dumps(
        {"query": "SELECT count(*) AS n FROM spans WHERE service_name = 'host-origin-test'"}).encode(),
        "application/json")
    assert reply.json()["rows"] == [{"n": 1}]


@pytest.mark.system
def test_beyond_loopback_only_allowed_hosts_are_served(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--host", "0.0.0.0", "--allowed-host", "lousho.internal",
                          env={"LOUSHO_TOKEN": "s3cret"})
    try:
        url = f"http://127.0.0.1:{_port(daemon.url)}"
        auth = {"authorization": "Bearer s3cret"}
        allowed = post(url, "/v1/sql", QUERY, "application/json", host="lousho.internal:4318", **auth)
        assert allowed.status == 200, allowed.body
        assert post(url, "/v1/sql", QUERY, "application/json", **auth).status == 200  # loopback names too
        refused = post(url, "/v1/sql", QUERY, "application/json", host="evil.example", **auth)
        assert refused.status == 403
        assert _error_code(refused) == "LOUSHO_OBSERVE_FORBIDDEN_HOST"
    finally:
        assert daemon.stop() == 0


@pytest.mark.parametrize(("value", "name"), [
    ("127.0.0.1:4318", "127.0.0.1"), ("[::1]:4318", "::1"), ("[::1]", "::1"), ("LocalHost.", "localhost"),
    ("evil.example", "evil.example"), ("a:b", None), ("[::1]x", None), ("", None),
])
def test_host_name_strips_port_and_brackets(value, name):
    assert host_name(value) == name
