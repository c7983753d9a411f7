"""``make demo-fleet``: three daemons, one lake, one query that sees every daemon's runs.

A throwaway Postgres (the lake's catalog; the same server the tests start, tests/recover/pg_support.py) and a
directory of Parquet files stand in for a platform's database and object storage. Three ``lousho observe``
daemons join the lake; an agent workload is sent to each with the OTel SDK's exporters (gRPC to one, HTTP to
two); then one ``lousho sql --lake`` counts every daemon's runs, and each daemon's ``/v1/sql?scope=lake``
answers the same. Exit 1 if any step does not happen.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "recover"))

from pg_support import postgres_server  # noqa: E402

from lousho.observe import instrument  # noqa: E402
from lousho.observe.client.process import start_daemon  # noqa: E402
from lousho.observe.client.workload import WorkloadPlan, emit_runs  # noqa: E402

QUERY = "SELECT agent, count(*) AS runs, count(*) FILTER (WHERE passed = false) AS failed FROM runs GROUP BY agent"


def say(text: str) -> None:
    print(text, flush=True)


def lake_rows(url: str, query: str) -> list[dict]:
    request = urllib.request.Request(f"{url}/v1/sql?scope=lake", json.dumps({"query": query}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())["rows"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".lousho/demo-fleet"))
    parser.add_argument("--runs", type=int, default=200, help="runs sent to each daemon")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    with postgres_server() as server:
        with server.admin() as con:
            con.execute("CREATE DATABASE lake")
        lake = server.url("lake")
        data = args.dir / "lake-data"
        say(f"1. a lake: catalog in Postgres on 127.0.0.1:{server.port}, Parquet files in {data}")
        daemons = [start_daemon(args.dir / f"host-{i}" / "observe.duckdb", "--lake", lake, "--lake-data", str(data),
                                "--lake-name", f"host-{i}", "--lake-every", "1") for i in range(3)]
        try:
            say("2. three daemons joined it: " + ", ".join(d.url for d in daemons))
            spans = 0
            for i, daemon in enumerate(daemons):
                protocol, endpoint = ("grpc", f"http://{daemon.grpc_target}") if i == 0 else ("http/protobuf",
                                                                                                daemon.url)
                provider = instrument(f"host-{i}", endpoint, protocol=protocol)
                spans += emit_runs(provider, WorkloadPlan(runs=args.runs, seed=i)).spans
                provider.shutdown()
                say(f"   sent {args.runs} runs to host-{i} over {protocol}")
            deadline = time.monotonic() + 120
            count = "SELECT count(*) AS n FROM spans"
            while lake_rows(daemons[0].url, count)[0]["n"] < spans:
                if time.monotonic() > deadline:
                    say("demo-fleet: the lake did not get every span in 120 s")
                    return 1
                time.sleep(0.5)
            say(f"3. the lake holds all {spans} spans; one query over every daemon's runs (lousho sql --lake):")
            out = subprocess.run([sys.executable, "-m", "lousho", "sql", "--lake", lake, "--lake-data", str(data),
                                  QUERY + " ORDER BY agent"], capture_output=True, text=True, timeout=120)
            print(out.stdout, end="")
            if out.returncode != 0:
                say(out.stderr)
                return 1
            answers = [lake_rows(d.url, QUERY + " ORDER BY agent") for d in daemons]
            total = sum(row["runs"] for row in answers[0])
            if total != 3 * args.runs or any(a != answers[0] for a in answers):
                say(f"demo-fleet: the daemons disagree or miss runs: {answers}")
                return 1
            say(f"4. each daemon's /v1/sql?scope=lake answers the same: {total} runs from 3 hosts")
        finally:
            for daemon in daemons:
                daemon.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
