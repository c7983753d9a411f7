"""The page and `lousho runs show` on runs with no lousho attribute: listed, opened with their span tree and
score, grouped into sessions; and the runs page says why when the store has spans but no run."""

from __future__ import annotations

import json

import pytest
from daemon_support import get, post
from genai_support import drive, lousho, model, wait_for_runs  # noqa: F401 (model is a fixture)
from otlp_bodies import chat_span, new_ids, request


@pytest.mark.slow
@pytest.mark.system
def test_the_page_lists_opens_and_groups_runs_of_an_openinference_agent(tmp_path, model, daemon):  # noqa: F811
    steps = [{"input": "what is the weather in Paris?", "verdict": "pass", "session": "chat-42"},
             {"input": "what is the weather in Lyon?", "verdict": "fail", "session": "chat-42"}]
    drive(tmp_path, model, daemon, "openinference", steps, "--agent", "page-agent")
    runs = wait_for_runs(daemon.url, "page-agent", 2)
    assert len(runs) == 2

    listing = get(daemon.url, "/?agent=page-agent")
    assert listing.status == 200
    assert all(r["run_id"] in listing.body.decode() for r in runs)
    assert '<option value="page-agent"' in listing.body.decode()

    opened = get(daemon.url, f"/runs/{runs[1]['run_id']}").body.decode()
    assert "ChatCompletion" in opened and "execute_tool get_weather" in opened and "answer_correct" in opened

    agents = get(daemon.url, "/agents").body.decode()
    assert 'href="/agents/page-agent"' in agents and 'class="num">2<' in agents

    sessions = get(daemon.url, "/sessions").body.decode()
    assert "chat-42" in sessions and all(r["run_id"] in sessions for r in runs)

    shown = lousho("runs", "--url", daemon.url, "show", runs[1]["run_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["run"]["input"] == "what is the weather in Lyon?" and doc["run"]["passed"] is False
    assert {s["name"] for s in doc["spans"]} >= {"invoke_agent page-agent", "ChatCompletion"}
    assert [s["score_label"] for s in doc["scores"]] == ["fail"]


@pytest.mark.system
def test_the_runs_page_says_why_when_spans_make_no_run(daemon):
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id, parent=new_ids()[1])]).SerializeToString()
    assert post(daemon.url, "/v1/traces", body, "application/x-protobuf").status == 200
    page = get(daemon.url, "/").body.decode()
    assert "No runs match." in page
    assert "no runs, though the store has 1 span" in page and "docs/observe.md#what-makes-a-run" in page
