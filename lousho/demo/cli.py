"""``make demo``: the main job on the embedded default, end to end, on a fresh store."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

# Frames and cards quote agent and model text: control characters are shown, never obeyed.
from lousho.kernel.text_safety import visible

EXAMPLE = Path(__file__).parents[1] / "agent" / "example"  # lousho/agent/example


@click.command()
@click.option("--dir", "workdir", type=click.Path(path_type=Path), default=Path(".lousho/demo"),
              show_default=True, help="Where the demo keeps its stores and agent copy (emptied first).")
@click.option("--runs", "n_runs", type=click.IntRange(min=1), default=200, show_default=True)
def demo(workdir: Path, n_runs: int) -> None:
    """Daemon, the reference agent on a scripted model, a killed run recovered, the store answering."""
    from lousho.agent.loop import RunOptions
    from lousho.agent.runner import AgentSetup, open_agent
    from lousho.analysis import cases_from_failures, pass_rates, runs
    from lousho.analysis.frames import PASS_RATE_COLUMNS
    from lousho.demo.tables import cases_table, rates_table
    from lousho.models.config import ModelConfig
    from lousho.models.faults import Fault
    from lousho.models.scripted import ScriptedModelServer
    from lousho.observe import connect
    from lousho.observe.client.process import start_daemon
    from lousho.observe.client.render import print_frame

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    agent_dir = workdir / "agent"
    shutil.copytree(EXAMPLE, agent_dir, ignore=shutil.ignore_patterns("__pycache__", "workspace"))
    db, store_url = workdir / "observe.duckdb", f"sqlite:///{workdir / 'runs.db'}"
    _say(f"1. observe daemon on a fresh store: {db}")
    daemon = start_daemon(db)
    try:
        _say(f"   OTLP/HTTP + SQL on {daemon.url}, OTLP/gRPC on {daemon.grpc_target}")
        with ScriptedModelServer(agent_dir / "model.py", seed=7) as model:
            # Batched export for the bulk runs; `lousho agent run` exports each span as it ends.
            setup = AgentSetup(agent_dir, ModelConfig(model.url, "scripted"), store_url, daemon.url,
                               check_path=agent_dir / "check.py", batch_export=True)
            _say(f"2. {n_runs} runs of the reference agent ({agent_dir}) on a scripted model at {model.url}")
            rng = random.Random(7)
            started = time.perf_counter()
            with open_agent(setup, {}) as agent:
                for i in range(n_runs):
                    text = _task(rng, i)
                    agent.send(text, options=RunOptions(case_id=_case(text)), setup=setup.to_payload())
            _say(f"   done in {time.perf_counter() - started:.1f} s; every model and tool call is a durable step")

            _say("3. a run is killed mid-flight (SIGKILL while the model hangs); the recover loop finishes it")
            model.inject(Fault.hang(60))
            child_log = workdir / "demo-killed.stderr"
            common = ["--model-url", model.url, "--model", "scripted", "--store", store_url, "--observe", daemon.url]
            with child_log.open("wb") as child_err:  # the child holds its own copy of the descriptor
                child = subprocess.Popen([sys.executable, "-P", "-m", "lousho", "agent", "run", str(agent_dir),
                                          "note: milk, eggs, bread", "--run-id", "demo-killed", *common,
                                          "--check", str(agent_dir / "check.py"), "--lease-seconds", "2"],
                                         stdout=subprocess.DEVNULL, stderr=child_err)
            _wait_for_run(store_url, "demo-killed", child, child_log)
            child.kill()
            child.wait()
            model.clear_faults()
            _lousho("runs", "pending", "--store", store_url)
            _recover_until_finished(store_url, "demo-killed", daemon.url)

        _say("4. lousho runs --failed --limit 8")
        _lousho("runs", "--url", daemon.url, "--failed", "--limit", "8")
        store = connect(daemon.url)
        _say("5. pass rate by harness revision (95% interval, cluster-robust by session and case; pass^3, "
             "tokens per passing run)")
        print_frame(rates_table(pass_rates(runs(store, agent="ledger", columns=PASS_RATE_COLUMNS))))
        _say("6. failed runs of the live revision, grouped into cases (what the improve loop learns from)")
        print_frame(cases_table(cases_from_failures(store, "ledger", recurring_only=True)))
        _improve_step(agent_dir, daemon.url)
        _self_healing_loop(agent_dir, daemon.url, store_url)
        _untagged_agent(daemon.url)
        _say("11. lousho sql: tokens and tool calls by outcome (unscored: the notes, which the check cannot score)")
        _lousho("sql", "--url", daemon.url,
                "SELECT status, CASE WHEN passed IS NULL THEN 'unscored' WHEN passed THEN 'pass' ELSE 'fail' END "
                "AS verdict, count(*) AS runs, sum(model_calls) AS \"model calls\", sum(tool_calls) AS \"tool calls\", "
                "sum(input_tokens + output_tokens) AS tokens FROM runs WHERE agent = 'ledger' "
                "GROUP BY ALL ORDER BY ALL")
    finally:
        code = daemon.stop()
    _say(f"12. daemon stopped with SIGTERM: drained, loaded, checkpointed, exit code {code}")
    if code != 0:
        raise SystemExit(code)
    _acked_then_killed(workdir / "burst.duckdb")
    _say(f"done. Stores: {db} (spans) and {store_url} (runs). Try: lousho sql --db {db} \"SELECT * FROM runs LIMIT 5\"")
    _say("To look at it, serve the demo's store (the page is on the daemon's HTTP port):")
    click.echo(f"   lousho observe --db {db} --agent ledger={agent_dir}:{agent_dir / 'check.py'} "
               f"--recover-store {store_url}")
    click.echo("   then open http://127.0.0.1:4318/ and look at:")
    click.echo("     /?failed=1                the failed runs; open one for its span tree, heal actions and score")
    click.echo("     /agents/ledger            pass rate by revision; the applied edits, the monitor's z path for "
               "the kept fix, the audit log")
    click.echo("     /recovery                 the run store: the killed run, finished; pending, quarantined, outage")
    click.echo(f"   and: lousho plot pass-rate --agent ledger --db {db} --out pass-rate.png")


def _improve_step(agent_dir: Path, observe_url: str) -> None:
    """One improvement step on the recurring failures: editors (a scripted editor model) propose, the
    gate tests on fresh runs, and the card is printed. Nothing is written to the agent directory."""
    from lousho.improve import StepOptions, format_improve_result, improve_agent
    from lousho.models.config import ModelConfig
    from lousho.models.scripted import ScriptedModelServer

    _say("7. lousho improve: one step on those cases (scripted editors; the agent directory is not written)")
    with ScriptedModelServer(agent_dir / "model.py", seed=1) as model, \
            ScriptedModelServer(agent_dir / "editor.py") as editor:
        options = StepOptions(model=ModelConfig(model.url, "scripted"),
                              editor_model=ModelConfig(editor.url, "scripted-editor"), observe=observe_url,
                              recurring_only=True)
        result = improve_agent(agent_dir, agent_dir / "check.py", options)
    click.echo(visible(format_improve_result(result), newlines=True), nl=False)


def _self_healing_loop(agent_dir: Path, observe_url: str, store_url: str) -> None:
    """The loop in auto mode: a cycle applies the fix after its canary and corpus guard; live runs of
    the new revision reach the daemon; the watcher's monitor keeps the edit. Then a harmful edit forced
    past the gate is rolled back by the watcher's corpus guard, and the audit chain still verifies."""
    from lousho.agent.loop import RunOptions
    from lousho.agent.runner import AgentSetup, open_agent
    from lousho.improve.cycle import LoopSetup, force_apply, run_cycle
    from lousho.improve.harness import read_harness
    from lousho.improve.options import StepOptions
    from lousho.improve.watch_lease import new_owner
    from lousho.improve.watcher import tick
    from lousho.models.config import ModelConfig
    from lousho.models.scripted import ScriptedModelServer

    _say("8. the self-healing loop, auto mode: lousho improve DIR --check check.py --apply")
    with ScriptedModelServer(agent_dir / "model.py", seed=1) as model, \
            ScriptedModelServer(agent_dir / "editor.py") as editor:
        agent_model = ModelConfig(model.url, "scripted")
        options = StepOptions(model=agent_model, editor_model=ModelConfig(editor.url, "scripted-editor"),
                              observe=observe_url)
        setup = LoopSetup(agent_dir, agent_dir / "check.py", options, environ={})
        cycle = run_cycle(setup)
        for check in cycle.checks:
            click.echo(visible(f"   {check.name}: {'pass' if check.passed else 'FAIL'}: {check.reason}"))
        click.echo(visible(f"   cycle: {cycle.outcome}: {cycle.reason}"))
        live = AgentSetup(agent_dir, agent_model, store_url, observe_url, check_path=agent_dir / "check.py",
                          batch_export=True)
        rng = random.Random(8)
        with open_agent(live, {}) as agent:
            for _ in range(64):
                text = _task(rng, 0)
                agent.send(text, options=RunOptions(case_id=_case(text)), setup=live.to_payload())
        click.echo("   64 live runs on the applied revision")
        owner = new_owner()
        watched = tick(setup, owner)
        click.echo(visible(f"   watcher tick: {watched.action}: {watched.reason}"))

        _say("9. a harmful edit forced past the gate; the watcher's corpus guard rolls it back")
        base = read_harness(agent_dir)
        harmful = base.with_file("instructions.md", base.files["instructions.md"]
                                 + "- Answer from memory; do not call tools.\n")
        click.echo(visible(f"   {force_apply(setup, harmful, reason='planted by the demo').reason}"))
        rolled = tick(setup, owner)
        click.echo(visible(f"   watcher tick: {rolled.action}: {rolled.reason}"))
        same = read_harness(agent_dir).revision == base.revision
        click.echo(f"   the harness is back at {read_harness(agent_dir).revision} (the kept edit): {same}")
    _lousho("improve", "audit", str(agent_dir), "--verify")
    _lousho("improve", "status", str(agent_dir))


def _acked_then_killed(db: Path, spans: int = 20_000) -> None:
    """A burst acked from the spool, a SIGKILL before the store loaded it, and the replay that loads it."""
    from lousho.observe import connect
    from lousho.observe.client.export import instrument
    from lousho.observe.client.process import start_daemon

    _say(f"13. a burst of {spans:,} spans from one process through instrument(): each export is acked once its body "
         "is synced in the spool, before DuckDB has it; then SIGKILL, no drain")
    # The loader gathers for 5 s here, so the kill finds every acked span in the spool and none in the store yet;
    # queries do not wait for it (--read-wait 0), so the count below shows what the store had.
    daemon = start_daemon(db, "--load-interval", "5", "--read-wait", "0")
    try:
        provider = instrument("burst-demo", daemon.url)
        tracer = provider.get_tracer("demo")
        started = time.perf_counter()
        for i in range(spans):
            with tracer.start_as_current_span(f"chat {i}", attributes={"gen_ai.operation.name": "chat"}):
                pass
        provider.shutdown()  # every batch exported and acked
        took = time.perf_counter() - started
        (loaded,) = connect(daemon.url).sql("SELECT count(*) AS n FROM spans")["n"]
        click.echo(f"   exported in {took:.1f} s; loaded into DuckDB before the kill: {loaded:,} spans")
    finally:
        daemon.kill()
    daemon = start_daemon(db)
    try:
        for line in daemon.output:
            if "replaying" in line:
                click.echo(f"   restart: {line.split('WARNING', 1)[-1].strip(' :')}")
        (stored,) = connect(daemon.url).sql("SELECT count(*) AS n FROM spans WHERE service_name = 'burst-demo'")["n"]
        click.echo(f"   after the restart the store has {stored:,} of the {spans:,} spans, each once")
        if stored != spans:
            raise click.ClickException(f"{spans - stored} acked spans were lost")
    finally:
        daemon.stop()


def _untagged_agent(observe_url: str) -> None:
    import polars as pl

    from lousho.analysis import cases_from_failures
    from lousho.demo.untagged import AGENT, CITIES, run_untagged_agent
    from lousho.observe import connect
    from lousho.observe.client.render import print_frame

    _say(f"10. an agent that knows nothing of lousho (plain openai, GenAI spans, no version): {len(CITIES)} runs, "
         "then its system prompt changes and it runs again")
    run_untagged_agent(observe_url)
    store = connect(observe_url)
    deadline = time.monotonic() + 30
    while store.sql("SELECT count(*) AS n FROM runs WHERE agent = ?", [AGENT])["n"][0] < 2 * len(CITIES):
        if time.monotonic() > deadline:
            raise click.ClickException(f"the {AGENT} agent's runs did not reach the store")
        time.sleep(0.1)
    click.echo("   each prompt is a revision of its own, derived from what the agent sent (auto:...):")
    _lousho("sql", "--url", observe_url,
            "SELECT harness_revision AS revision, revision_source AS source, count(*) AS runs, "
            "count(*) FILTER (WHERE status = 'error') AS failed, min(started_at) AS first FROM runs "
            f"WHERE agent = '{AGENT}' GROUP BY ALL ORDER BY first")
    click.echo("   and the live revision's failures are cases, as for any agent (the case is its input's hash):")
    cases = cases_from_failures(store, AGENT)
    print_frame(cases.select(pl.col("input").alias("input (the user's question)"), pl.col("count").alias("failed runs"),
                             pl.col("errors").list.join(", ").alias("errors")))


def _recover_until_finished(store_url: str, run_id: str, observe_url: str, timeout: float = 60.0) -> None:
    """Run the recover loop (as `lousho recover --app lousho.agent.recoverable:AgentApp` would) until
    the killed run is finished: its lease lapses, the loop claims it and resumes it."""
    from lousho.agent.recoverable import AgentApp
    from lousho.recover import open_store, recover

    store = open_store(store_url)
    app = AgentApp(store_url, environ={"LOUSHO_OBSERVE": observe_url})
    recovered: list[str] = []
    handle = recover(store, app, interval=0.5, on_recovered=recovered.append)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and run_id not in recovered:
            time.sleep(0.2)
    finally:
        handle.stop()
    record = store.get_run(run_id)
    store.close()
    status = record.status if record else "missing"
    click.echo(f"   recover(): on_recovered({run_id!r}); status {status}, attempt {record.attempts if record else 0}, "
               f"output {(record.output or {}).get('text') if record else None!r}")
    if run_id not in recovered:
        raise click.ClickException(f"the recover loop did not finish {run_id} within {timeout:g} s")


def _task(rng: random.Random, i: int) -> str:
    if i % 4 == 3:
        return "note: " + ", ".join(rng.sample(["milk", "eggs", "rice", "tea", "soap", "salt"], 2))
    # A small set of sums, so failures recur on the same cases.
    pairs = [(3, 4, 5), (10, 20), (7, 8, 9, 10), (1.5, 2.5), (100, 250, 50), (6, 7)]
    numbers = pairs[rng.randrange(len(pairs))]
    return "add " + " ".join(f"{n:g}" for n in numbers)


def _case(text: str) -> str:
    return text.split(":")[0].replace(" ", "-") if text.startswith("add") else "notes"


def _wait_for_run(store_url: str, run_id: str, child: subprocess.Popen[bytes], log: Path,
                  timeout: float = 60.0) -> None:
    """Until the run exists in the store (it is created before its first model call, which hangs). A child
    that exits first, or never creates it, ends the demo with what it printed: waiting on would only hide it."""
    from lousho.recover.store import open as open_store

    store = open_store(store_url)
    try:
        deadline = time.monotonic() + timeout
        while store.get_run(run_id) is None:
            if child.poll() is not None or time.monotonic() >= deadline:
                child.kill()
                child.wait()
                tail = log.read_text(errors="replace").strip().splitlines()[-15:]
                raise click.ClickException(f"the agent run {run_id} did not start (exit code {child.returncode}); "
                                           "it printed:\n" + ("\n".join(tail) or "(nothing)"))
            time.sleep(0.05)
    finally:
        store.close()
    time.sleep(0.5)  # its model call is now in flight, answered by a hang


def _lousho(*args: str) -> None:
    if subprocess.run([sys.executable, "-P", "-m", "lousho", *args]).returncode != 0:
        raise click.ClickException(f"`lousho {' '.join(args[:2])}` failed; its error is above")


def _say(text: str) -> None:
    click.secho(text, bold=text[:1].isdigit())
