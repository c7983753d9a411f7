"""An answer is bounded as JSON or CSV, not only as Arrow: a query whose Arrow rows are tiny but whose text is huge
(a long column name repeated in every JSON row object, a long struct field name in every value, hundreds of NULL
columns, which Arrow stores in no bytes at all) is refused with LOUSHO_SQL_OUT_OF_MEMORY before the daemon holds
that text. Before, the whole text was built first and measured after: a 1 MiB query could make the daemon build
gigabytes and be killed by the kernel."""

from __future__ import annotations

import json

import pytest
from daemon_support import get, post, sql

from lousho.observe.client.process import start_daemon


def _peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _ask(url: str, query: str, accept: str = "application/json"):
    return post(url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json", accept=accept)


# Each answer is a few MiB of Arrow (the --sql-query-memory bound is 16 MiB) and 150 to 400 MB of text.
_AMPLIFIED = [
    ('SELECT 1 AS "' + "k" * 4000 + '" FROM range(100000)', "application/json"),
    ("SELECT {'" + "f" * 4000 + "': 1} AS s FROM range(100000)", "application/json"),
    ("SELECT " + ", ".join(f"NULL AS c{i}" for i in range(300)) + " FROM range(500000)", "text/csv"),
]


@pytest.mark.system
def test_an_answer_whose_text_outgrows_its_arrow_is_refused_before_the_daemon_holds_it(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--sql-query-memory", "16MiB")
    pid = daemon.process.pid
    try:
        # Warm: the first answers load Polars and the encoders.
        assert sql(daemon.url, "SELECT 1 AS a, {'b': 2} AS s") == [{"a": 1, "s": {"b": 2}}]
        assert _ask(daemon.url, "SELECT NULL AS a FROM range(3)", "text/csv").status == 200
        before = _peak_mib(pid)
        for query, accept in _AMPLIFIED:
            reply = _ask(daemon.url, query, accept)
            assert reply.status == 400, reply.body[:300]
            assert reply.json()["error"]["code"] == "LOUSHO_SQL_OUT_OF_MEMORY", reply.body[:300]
        grown = _peak_mib(pid) - before
        assert grown < 120, f"the daemon's peak memory grew {grown:.0f} MiB for answers it refused"
        # An answer within the bound still comes whole, in both encodings.
        rows = sql(daemon.url, 'SELECT range AS "' + "k" * 100 + '" FROM range(1000)')
        assert len(rows) == 1000 and rows[-1] == {"k" * 100: 999}
        reply = _ask(daemon.url, "SELECT range AS n, NULL AS z FROM range(1000)", "text/csv")
        assert reply.status == 200 and reply.body.decode().splitlines()[:2] == ["n,z", "0,"], reply.body[:100]
        assert get(daemon.url, "/healthz").json() == {"status": "ok"}
    finally:
        assert daemon.stop() == 0
