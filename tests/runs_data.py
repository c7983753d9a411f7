"""Random stores that exercise every rule of what makes a run, as decoded batches (the store's input).

With the checks that ``runs`` and ``sessions`` (and the kept tables, when nothing is unfolded) answer what
the runs view's definition answers on the same spans.

Traces with a lousho run id (one run over several traces, as a resume makes), traces without one
(an ``invoke_agent`` root with or without the framework's call id, bare roots, several candidate roots),
traces mixing both and traces carrying two run ids; spans in every status, with and without tokens,
cost, skills, texts and conversation ids; scores passing, failing and unjudged. Every start and every
end time is distinct, so each "first" and "last" of the runs view has one answer.
"""

from __future__ import annotations

import math
import random

import duckdb

from lousho.observe.decode.otlp_decode import SCORE_FIELDS, SPAN_FIELDS, Decoded, resource_key
from lousho.observe.runs.runs_view import runs_select
from lousho.observe.runs.sessions_view import picked_sessions_select, sessions_select

EMPTY_RESOURCE = resource_key("{}")


def _span(rng: random.Random, trace: str, span_id: str, parent: str | None, start: int, end: int, *,
          operation: str | None, run_id: str | None, agent: str | None, service: str,
          conversation: str | None, call_id: str | None) -> dict:
    status = rng.choice(("OK", "UNSET", "ERROR", "OK"))
    pick = rng.choice
    return {
        "key_hi": int(span_id, 16), "key_lo": int(trace[16:], 16), "trace_id": trace, "span_id": span_id,
        "parent_span_id": parent, "name": operation or "work", "kind": "INTERNAL", "start_ns": start,
        "end_ns": end, "status_code": status, "status_message": pick((None, "boom", "late")) if status == "ERROR"
        else None, "service_name": service, "scope_name": "tests", "operation": operation, "agent_name": agent,
        "provider": pick((None, "openai", "anthropic")), "request_model": pick((None, "m-1", "m-2")),
        "response_model": pick((None, "m-1r")), "tool_name": None, "conversation_id": conversation,
        "error_type": pick((None, "timeout", "ValueError")), "run_id": run_id,
        "run_kind": pick((None, "live", "replay")) if run_id else None,
        "healed_from": pick((None, None, "run-0")) if run_id else None,
        "harness_revision": pick((None, "rev-1", "rev-2")), "case_id": pick((None, None, "case-a", "case-b")),
        "traffic_arm": pick((None, "a", "b")), "input": pick((None, '{"q": 1}')) if run_id else None,
        "output": pick((None, '{"a": 2}')) if run_id else None,
        "input_tokens": pick((None, 10, 200)), "output_tokens": pick((None, 5, 70)),
        "cost_usd": pick((None, rng.randint(0, 1000) / 1024)), "probe": pick((None, False, True)),
        "attributes": "{}", "resource_key": EMPTY_RESOURCE, "events": None, "links": None,
        "call_id": call_id, "cost_source": pick((None, "reported", "price-table")),
        "skill_name": pick((None, None, "search", "edit")),
        "input_text": pick((None, "What is the weather?", "  what IS the   weather? ")),
        "output_text": pick((None, "Sunny.", "Rain.")),
        "cache_read_tokens": pick((None, 3)), "cache_creation_tokens": pick((None, 4)),
        "reasoning_tokens": pick((None, 8)),
        "fingerprint": pick((None, None, "print-a", "print-b")), "revision_source": pick((None, None, "version")),
    }


def random_store(seed: int, traces: int = 60) -> tuple[list[dict], list[dict]]:
    """Span rows and score rows (each a dict of the decoder's fields) of ``traces`` random traces."""
    rng = random.Random(seed)
    times = iter(rng.sample(range(10**12, 10**12 + 10**9), traces * 40))
    spans: list[dict] = []
    scores: list[dict] = []
    # A quote in an id: the writer lists ids as SQL literals.
    run_pool = [f"run-{i}" for i in range(max(2, traces // 4))] + ["run-o'brien"]
    for t in range(traces):
        trace = f"{rng.getrandbits(128):032x}"
        shape = rng.choice(("run", "run", "invoke", "invoke_call", "bare", "roots", "mixed", "two_runs"))
        agent = rng.choice((None, "coder", "planner"))
        service = rng.choice(("svc-a", "svc-b"))
        conversation = rng.choice((None, "conv-1", "conv-2", f"conv-t{t}"))
        run_ids = rng.sample(run_pool, 2)
        rows: list[dict] = []
        for i in range(rng.randint(1, 7)):
            start = next(times)
            end = start + next(times) % 10**6 + 1
            span_id = f"{rng.getrandbits(64):016x}"
            root = i == 0 or (shape == "roots" and rng.random() < 0.5)
            parent = None if root else rows[rng.randrange(len(rows))]["span_id"]
            operation = rng.choice(("chat", "execute_tool", None, "text_completion"))
            run_id = call_id = None
            if shape in ("run", "two_runs") and (root or rng.random() < 0.5):
                run_id = run_ids[0] if shape == "run" or rng.random() < 0.5 else run_ids[1]
            if shape == "mixed" and rng.random() < 0.3:
                run_id = run_ids[0]
            if shape in ("invoke", "invoke_call", "run") and (root or rng.random() < 0.2):
                operation = "invoke_agent"
                call_id = f"call-{trace[:8]}'{i}" if shape == "invoke_call" and rng.random() < 0.8 else None
            rows.append(_span(rng, trace, span_id, parent, start, end, operation=operation, run_id=run_id,
                              agent=agent, service=service, conversation=conversation, call_id=call_id))
        for row in rows:
            for seq in range(rng.choice((0, 0, 0, 1, 2))):
                scores.append({
                    "key_hi": row["key_hi"], "key_lo": row["key_lo"], "seq": seq, "trace_id": trace,
                    "span_id": row["span_id"], "run_id": row["run_id"], "name": "check", "score_value": None,
                    "score_label": None, "explanation": None, "failed_check": None,
                    "passed": rng.choice((None, True, False, True)), "error_type": None,
                    "time_ns": row["end_ns"], "attributes": "{}"})
        spans.extend(rows)
    return spans, scores


def decoded(spans: list[dict], scores: list[dict]) -> Decoded:
    """The rows as the decoder hands them to the writer."""
    return Decoded(spans={f: [row[f] for row in spans] for f in SPAN_FIELDS},
                   scores={f: [row[f] for row in scores] for f in SCORE_FIELDS},
                   resources={EMPTY_RESOURCE: "{}"})


def in_requests(rng: random.Random, spans: list[dict], scores: list[dict], count: int) -> list[Decoded]:
    """The rows shuffled into ``count`` requests, each score sent with its span."""
    order = spans[:]
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, len(order)), count - 1)) if count > 1 else []
    by_span: dict[str, list[dict]] = {}
    for score in scores:
        by_span.setdefault(score["span_id"], []).append(score)
    requests = []
    for lo, hi in zip([0, *cuts], [*cuts, len(order)], strict=True):
        part = order[lo:hi]
        requests.append(decoded(part, [s for row in part for s in by_span.get(row["span_id"], [])]))
    return requests


def rows_of(con: duckdb.DuckDBPyConnection, query: str, key: str) -> list[tuple]:
    return _rounded(con.execute(f"SELECT * FROM ({query}) ORDER BY {key}").fetchall())


def _rounded(rows: list[tuple]) -> list[tuple]:
    # Sums of costs may add in another order: equal to the last bits that order can change.
    return [tuple(round(v, 9) if isinstance(v, float) and not math.isnan(v) else v for v in row) for row in rows]


def unfolded(con: duckdb.DuckDBPyConnection) -> int:
    """How many stored spans are not folded into the kept tables."""
    return con.execute("SELECT count(*) FROM spans WHERE commit_seq > (SELECT watermark FROM runs_fold)"
                       ).fetchall()[0][0]


def assert_runs_match_the_view(con: duckdb.DuckDBPyConnection) -> None:
    view = runs_select()
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] > 0
    assert [d[0] for d in con.execute("SELECT * FROM runs LIMIT 0").description] == \
        [d[0] for d in con.execute(f"SELECT * FROM ({view}) LIMIT 0").description]
    assert rows_of(con, "SELECT * FROM runs", "run_id") == rows_of(con, view, "run_id")
    assert rows_of(con, "SELECT * FROM sessions", "session_id") == \
        rows_of(con, sessions_select(f"({view})"), "session_id")


def assert_picked_sessions_match_the_view(con: duckdb.DuckDBPyConnection) -> None:
    """A page of sessions with their run ids, picked before the lists are made (as the page and ``lousho
    sessions`` ask), is the view's page: the first, a middle and the last page of three, and one agent's first."""
    order = "last_at DESC, session_id"
    count = con.execute("SELECT count(*) FROM sessions").fetchall()[0][0]
    assert count > 0 and con.execute("SELECT count(*) FROM sessions WHERE agent = 'coder'").fetchall()[0][0] > 0
    for where, params, offsets in (("", [], {0, count // 2, max(count - 3, 0)}), ("WHERE agent = ?", ["coder"], {0})):
        for offset in sorted(offsets):
            picked = con.execute(picked_sessions_select("*", where, order), [*params, 3, offset]).fetchall()
            assert _rounded(picked) == _rounded(con.execute(
                f"SELECT * FROM sessions {where} ORDER BY {order} LIMIT 3 OFFSET ?", [*params, offset]).fetchall())


def assert_kept_tables_match_the_view(con: duckdb.DuckDBPyConnection) -> None:
    """With nothing left unfolded, the kept tables alone are the view's answer."""
    assert unfolded(con) == 0
    view = runs_select()
    assert rows_of(con, "SELECT * FROM kept_runs", "run_id") == rows_of(con, view, "run_id")
    assert rows_of(con, "SELECT * FROM kept_sessions", "session_id") == \
        rows_of(con, sessions_select(f"({view})", run_ids=False), "session_id")
