"""The recover benchmarks' --json: one object each, with the headline figures at the top (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[2] / "benchmarks" / "perf"


def _json_of(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(PERF / script), "--json", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # the whole of stdout is one JSON document (progress goes to stderr)


@pytest.mark.slow
@pytest.mark.system
def test_checkpoints_json_gives_the_overhead_on_1ms_steps_and_durable_writes_per_second(tmp_path: Path):
    doc = _json_of("checkpoints.py", "--repeats", "1", "--writes", "50", "--runs", "3", "--dir", str(tmp_path))
    for key in ("overhead_1ms_steps", "durable_writes_per_s", "overhead_1ms_steps_full", "durable_writes_per_s_full"):
        assert isinstance(doc[key], float) and doc[key] > (0 if key.startswith("durable") else -1), key
    assert doc["overhead_1ms_steps"] == doc["results"][0]["overhead"]
    assert len(doc["load_average"]["before"]) == 3 and doc["cpus"] >= 1


@pytest.mark.slow
@pytest.mark.system
def test_recover_json_gives_the_tick_on_each_store_and_resumes_per_second_by_replica_count(tmp_path: Path):
    doc = _json_of("recover.py", "--pending", "400", "--repeats", "1", "--runs", "30", "--replicas", "1,2",
                   "--start-postgres", "--dir", str(tmp_path))
    assert doc["tick_s_sqlite"] > 0 and doc["tick_s_postgres"] > 0
    assert set(doc["resumes_per_s"]) == {"sqlite", "postgres"}
    for rates in doc["resumes_per_s"].values():
        assert set(rates) == {"1", "2"} and all(rate > 0 for rate in rates.values())
    assert doc["stores"]["postgres"]["tick"]["round_trips_per_resume"] > 0
