"""Mutated protobuf and JSON bodies never get a 5xx, and the daemon keeps serving."""

from __future__ import annotations

import json

import pytest
from daemon_support import get, post
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otlp_bodies import chat_span, kv, new_ids, request, to_json

_trace, _root = new_ids()
_, _child = new_ids()
_req = request([chat_span(_trace, _root, **{"lousho.run.id": "fuzz"}), chat_span(_trace, _child, parent=_root)])
_req.resource_spans[0].scope_spans[0].spans[0].events.add(name="gen_ai.evaluation.result").attributes.append(
    kv("gen_ai.evaluation.score.label", "pass")
)
PROTO = _req.SerializeToString()
JSON_DOC = json.loads(to_json(_req))

# Derandomized: CI must give the same verdict on every run; raise max_examples locally to explore more.
_settings = settings(max_examples=400, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def mutated_bytes(draw):
    body = bytearray(PROTO)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        pos = draw(st.integers(0, max(len(body) - 1, 0)))
        if op == "flip" and body:
            body[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del body[pos: pos + draw(st.integers(1, 64))]
        elif op == "insert":
            body[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            body += body[pos: pos + draw(st.integers(1, 128))]
    return bytes(body)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for p in _paths(JSON_DOC) if p]


@st.composite
def mutated_json(draw):
    doc = json.loads(json.dumps(JSON_DOC))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(ALL_PATHS))
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue
    return json.dumps(doc).encode()


@pytest.mark.system
@pytest.mark.slow
@_settings
@given(body=mutated_bytes())
def test_mutated_protobuf_never_gets_a_5xx(shared_daemon, body):
    reply = post(shared_daemon.url, "/v1/traces", body, "application/x-protobuf")
    assert reply.status in (200, 400), reply.body[:200]


@pytest.mark.system
@pytest.mark.slow
@_settings
@given(body=mutated_json())
def test_mutated_json_never_gets_a_5xx(shared_daemon, body):
    reply = post(shared_daemon.url, "/v1/traces", body, "application/json")
    assert reply.status in (200, 400), reply.body[:200]


@pytest.mark.system
def test_daemon_still_healthy_after_fuzzing(shared_daemon):
    assert get(shared_daemon.url, "/healthz").status == 200
