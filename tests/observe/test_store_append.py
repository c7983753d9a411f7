"""The writer's append: a group of requests' Arrow batches is committed whole, with its scores, once."""

from __future__ import annotations

from otlp_bodies import chat_span, kv, new_ids, request

from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.store import span_store
from lousho.observe.store.span_store import SpanStore


def _request(spans: int):
    trace_id, root_id = new_ids()
    out = []
    for index in range(spans):
        span = chat_span(trace_id, new_ids()[1], parent=root_id)
        if index % 1000 == 0:
            event = span.events.add(name="gen_ai.evaluation.result")
            event.attributes.extend([kv("gen_ai.evaluation.name", "t"), kv("gen_ai.evaluation.score.label", "pass")])
        out.append(span)
    return request(out)


def test_a_group_of_arrow_batches_is_stored_whole_in_one_commit_and_a_resend_is_all_duplicates(tmp_path):
    spans = 3017
    first, second = _request(spans), _request(5)
    store = SpanStore(tmp_path / "s.duckdb")
    try:
        result = store.append([span_store.arrow_batch(decode_request(first)),
                               span_store.arrow_batch(decode_request(second))])
        assert (result.inserted, result.duplicates) == (spans + 5, 0)
        con = store.reader()
        assert con.execute("SELECT count(*), count(DISTINCT span_key), count(DISTINCT received_ns) FROM spans"
                           ).fetchone() == (spans + 5, spans + 5, 1)
        assert con.execute("SELECT count(*) FROM scores").fetchone() == (spans // 1000 + 1 + 1,)
        again = store.append([decode_request(first)])
        assert (again.inserted, again.duplicates) == (0, spans)
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (spans + 5,)
    finally:
        store.close()
