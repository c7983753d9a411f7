"""Mutated OTLP bodies (protobuf and JSON) of one small valid request: the fuzz tests' inputs, shared by the
daemon's fuzz test and the native decoder's differential test."""

from __future__ import annotations

import json

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
