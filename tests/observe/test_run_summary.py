"""`lousho runs show RUN_ID` at 100 columns: a vertical summary (agent, revision, model, status, verdict,
tokens, cost, input and output) above the span tree, compared with a stored snapshot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from genai_support import wait_for_runs

from lousho.observe import agent_run, instrument

SNAPSHOT = Path(__file__).parent / "snapshots" / "runs_show_100.txt"
QUESTION = "What is the weather in Lisbon today, and should I take an umbrella? " * 4
ANSWER = "Sunny, 24 C; no umbrella.\nA light breeze from the west in the afternoon."
# What changes from run to run: start time and durations.
VARYING = [(re.compile(r"\d{4}-\d\d-\d\d[ T][\d:.+]+"), "<time>"), (re.compile(r"\d+\.\d+ (ms|s)\b"), r"<t> \1")]


def emit_weather_run(url: str) -> None:
    provider = instrument("weather-agent", url)
    tracer = provider.get_tracer("test")
    with agent_run("weather", revision="v7", input=QUESTION, case_id="lisbon", run_id="run-snapshot",
                   tracer_provider=provider) as run:
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini", "gen_ai.provider.name": "openai",
                "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80}):
            pass
        with tracer.start_as_current_span("execute_tool forecast", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "forecast"}):
            pass
        run.output(ANSWER)
        run.verdict(False, failed_check="mentions_wind", explanation="the check wanted the wind speed")
    provider.shutdown()


def shown(text: str) -> str:
    for pattern, mask in VARYING:
        text = pattern.sub(mask, text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


@pytest.mark.system
def test_runs_show_at_100_columns_is_a_vertical_summary_above_the_span_tree(daemon):
    emit_weather_run(daemon.url)
    wait_for_runs(daemon.url, "weather", 1)
    done = subprocess.run([sys.executable, "-m", "lousho", "runs", "--url", daemon.url, "show", "run-snapshot",
                           "--width", "100"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 100
    if os.environ.get("LOUSHO_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(shown(done.stdout))
    assert shown(done.stdout) == SNAPSHOT.read_text()
