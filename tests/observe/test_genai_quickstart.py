"""docs/observe.md's quickstart, run as written: an openai-SDK agent traced by OpenInference sends real spans
to a daemon child process (the scripted model server stands in for the provider), then `lousho runs` shows
its run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from genai_support import lousho, model, wait_for_runs  # noqa: F401 (model is a fixture)

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "observe.md"


def quickstart_code() -> str:
    section = DOC.read_text().split("### Quickstart", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, flags=re.S)[:1]
    return code


@pytest.mark.slow
@pytest.mark.system
def test_the_quickstart_sends_a_run_that_lousho_runs_shows(tmp_path, model, daemon):  # noqa: F811
    script = tmp_path / "agent.py"
    script.write_text(quickstart_code())
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": daemon.url, "OPENAI_BASE_URL": model.url,
           "OPENAI_API_KEY": "sk-test"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    wait_for_runs(daemon.url, "weather", 1)
    listed = lousho("runs", "--url", daemon.url, "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    assert (run["agent"], run["harness_revision"], run["model"], run["passed"]) == ("weather", "v1", "gpt-4o-mini",
                                                                                     True)
    assert run["input_tokens"] > 0 and run["cost_usd"] > 0 and run["cost_source"] == "price-table"
