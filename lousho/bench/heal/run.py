"""Running the benchmark: the shared parts, each scenario at its count, then the study and the layout.

With ``attempts="full"`` a scenario runs until its bar has the attempts it needs that tested something;
an attempt whose precondition failed (a "precondition miss") is recorded and replaced, at most as many
times as the bar's count. With a number N, each scenario makes N attempts the same way. The live guard
checks the observe database before every attempt (and, through the editors' client, before every
editor call); a foreign run stops the benchmark with :class:`ForeignRuns`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lousho.bench.heal.bench import Bench, Live, Switch
from lousho.bench.heal.catalog import ALL, LAYOUT, SCENARIOS, STUDY, Scenario
from lousho.bench.heal.errors import ForeignRuns, LiveGuardTripped, UnknownScenario
from lousho.bench.heal.rows import RowWriter
from lousho.improve import audit, proposals
from lousho.improve.state import Paths
from lousho.kernel.errors import LoushoError


@dataclass(frozen=True)
class Options:
    out: Path
    work: Path
    db: Path | None = None  # None: a fresh database in the work directory
    scenarios: tuple[str, ...] = ALL
    attempts: int | None = None  # None: full count
    seed: int = 0
    live: Live | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    append: bool = False


def parse_scenarios(value: str) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names or names == ["all"]:
        return ALL
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise UnknownScenario(f"unknown scenarios {unknown}; the names are: {', '.join(ALL)}")
    return tuple(n for n in ALL if n in names)


def remove_store(db: Path) -> None:
    """The store at ``db`` and what the daemon keeps beside it: its WAL, and the spool and spill directories
    (a stopped daemon leaves them, so a second run found a directory where it unlinked files)."""
    for stale in db.parent.glob(db.name + "*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink()


@contextmanager
def running(options: Options) -> Iterator[Bench]:
    """The daemon and the two scripted model servers, for the whole run."""
    from lousho.models.scripted import ScriptedModelServer
    from lousho.observe.client.process import start_daemon
    from lousho.observe.client.store_client import connect

    options.work.mkdir(parents=True, exist_ok=True)
    db = options.db or options.work / "observe.duckdb"
    if options.db is None and not options.append:  # a fresh store of the benchmark's own
        remove_store(db)
    daemon = start_daemon(db)
    agent_switch, editor_switch = Switch(), Switch()
    try:
        with ScriptedModelServer(agent_switch) as agent_server, ScriptedModelServer(editor_switch) as editor_server:
            store = connect(daemon.url)
            yield Bench(options.work, options.seed, daemon.url, store.sql, agent_server, editor_server, agent_switch,
                        editor_switch, options.live, options.environ)
    finally:
        daemon.stop()


def run(options: Options, say: Callable[[str], None] = lambda _: None) -> int:
    """Run the chosen parts; returns the number of rows written."""
    writer = RowWriter(options.out, append=options.append)
    count = 0
    try:
        with running(options) as bench:
            _check(bench, "before the first attempt")
            for scenario in SCENARIOS:
                if scenario.name in options.scenarios:
                    for row in attempts(bench, scenario, options.attempts):
                        writer.write(row)
                        count += 1
                        say(_line(row))
            if STUDY in options.scenarios:
                from lousho.bench.heal.study import study

                for row in study(bench, options.attempts, check=lambda where: _check(bench, where)):
                    writer.write(row)
                    count += 1
                    say(f"{STUDY} {row['task']} {row['condition']} {row['attempt']}: proposal {row['proposal']}, "
                        f"confirmed {row['confirmed']} ({row['seconds']:.1f} s)")
            if LAYOUT in options.scenarios:
                from lousho.bench.heal.layout import layout

                _check(bench, "before the layout check")
                for row in layout(bench, options.attempts):
                    writer.write(row)
                    count += 1
                    hat = "-" if row["pass_hat_3"] is None else f"{row['pass_hat_3']:.3f}"
                    say(f"{LAYOUT} {row['arm']}: pass^3 {hat}, mean tokens {row['mean_tokens']:.0f} "
                        f"({row['seconds']:.1f} s)")
    except LiveGuardTripped as e:
        raise ForeignRuns(f"stopped {e.where}: the observe database holds runs of agents that are not the "
                          f"benchmark's: {', '.join(e.agents)}") from None
    finally:
        writer.close()
    return count


def attempts(bench: Bench, scenario: Scenario, count: int | None) -> Iterator[dict[str, Any]]:
    """Attempts until ``count`` (the bar's count when None) tested something, replacing precondition
    misses at most ``count`` times."""
    target = scenario.attempts if count is None else count
    counted = made = 0
    while counted < target and made < 2 * target:
        row = attempt_row(bench, scenario, made + 1)
        made += 1
        counted += bool(row["counted"])
        yield row


def attempt_row(bench: Bench, scenario: Scenario, index: int) -> dict[str, Any]:
    _check(bench, f"before {scenario.name} attempt {index}")
    a = bench.attempt(scenario.name, index, live_agent=scenario.live_agent, live_editor=scenario.live_editor,
                      planted=dict(scenario.planted) or None)
    started = time.monotonic()
    try:
        from lousho.bench.heal.scenarios import RUNNERS

        result = RUNNERS[scenario.name](a)
        passed, counted, outcome, detail = result.passed, result.counted, result.outcome, result.detail
    except LoushoError as e:  # a failure of the loop (or of the benchmark's setup) fails the attempt, recorded
        passed, counted, outcome, detail = False, True, f"error {e.code}", e.message
    finally:
        a.close()
    verdict = audit.verify(a.paths)
    decisions = [g for p in proposals.list_all(a.paths) for g in p.get("gate", [])]
    gates = sorted({g["gate"] for g in decisions if g.get("gate")})
    # The unit each proposal's cost rule compared: usd when every run had a price, else tokens.
    cost_units = sorted({g["cost"].get("unit", "tokens") for g in decisions if g.get("cost")})
    return {"kind": "attempt", "scenario": scenario.name, "attempt": index, "seed": a.seed, "passed": passed,
            "counted": counted, "outcome": outcome, "detail": detail[:2000], "must_happen": scenario.must_happen,
            "planted_harm": scenario.planted_harm, "audit_ok": verdict.ok, "audit": verdict.reason,
            "audit_lines": verdict.lines,
            "seconds": round(time.monotonic() - started, 2), "dir": str(a.dir), **a.models(), **a.meter.to_dict(),
            "editor_requests": a.editor_meter.requests, "gates": gates, "cost_units": cost_units,
            "monitors": monitor_designs(a.paths)}


def monitor_designs(paths: Paths) -> list[str]:
    """The designs the attempt's monitor verdicts recorded in its audit log (concurrent, or stratified when no
    session was held back; seed by name): what ran, not what the benchmark asked for."""
    return sorted({str(e["design"]) for _, e in audit.numbered_entries(paths)
                   if e is not None and e.get("action") == "monitor" and e.get("design")})


def _check(bench: Bench, where: str) -> None:
    bench.guard()(where)


def _line(row: dict[str, Any]) -> str:
    verdict = "pass" if row["passed"] else "FAIL" if row["counted"] else "precondition miss"
    return f"{row['scenario']} {row['attempt']}: {verdict}: {row['outcome']} ({row['seconds']:.1f} s)"

