"""``lousho observe``: the daemon command, apart from the client side's commands (``client/cli.py``),
which must not load the daemon. The entry point (``lousho.observe.entry``) wires in what observe may not import."""

from __future__ import annotations

import copy
import functools
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from lousho.observe import memory_cap
from lousho.observe.client.cli import DEFAULT_DB, _token
from lousho.observe.config import MIB, DaemonConfig

if TYPE_CHECKING:
    from lousho.observe.receive.http_app import PageFactory
    from lousho.observe.trigger.cycle import AgentSpec


# Builds the web page from the daemon's settings, the registered agents and --recover-store (raw: the
# page parses it with the recover part's parser).
PageMaker = Callable[[DaemonConfig, "tuple[AgentSpec, ...]", "str | None"], "PageFactory"]


def _accept(value: object) -> None:
    """No check: the command as observe alone can run it."""


@dataclass(frozen=True)
class Wiring:
    """What the daemon command needs from parts observe may not import (DESIGN §1); the entry point
    (``lousho.observe.entry``) passes it in with :func:`wired`.

    Each check runs before any port is bound or file created, and refuses with a usage error (exit 2).
    """

    # The page at /; None: no page.
    make_page: PageMaker | None = None
    # Refuses an --agent whose DIR or CHECK_MODULE every cycle would fail on (the improve part's rules).
    check_agent: Callable[[AgentSpec], None] = _accept
    # Refuses a malformed --model-url or --editor-model-url (the models part's rules).
    check_model_url: Callable[[str], None] = _accept


def _read_config(ctx: click.Context, param: click.Parameter, path: Path | None) -> Path | None:
    """``--config FILE``: a TOML table of the command's options (``lake = "postgresql://..."``, ``lake-data``,
    ``port``, ...; dashes or underscores), taken as their defaults, so a flag or an environment variable given
    as well still wins. An unknown key is a usage error, not a silent no-op."""
    if path is None:
        return None
    import tomllib

    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise click.BadParameter(f"cannot read {path}: {e}", ctx=ctx, param=param) from None
    table = table.get("observe", table)  # a file may hold the daemon's table among others
    names = {p.name for p in ctx.command.params if p.name}
    defaults = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in names or name in ("config", "wiring"):
            raise click.BadParameter(f"{path}: unknown option {key!r}", ctx=ctx, param=param)
        defaults[name] = value
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


@click.command()
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), default=None, is_eager=True,
              expose_value=False, callback=_read_config, metavar="FILE",
              help="A TOML file of these options (e.g. the fleet's lake and lake-data); flags override it.")
@click.option("--db", type=click.Path(path_type=Path), default=DEFAULT_DB, show_default=True,
              help="DuckDB file the daemon owns (created if missing).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=4318, show_default=True, help="OTLP/HTTP and SQL port.")
@click.option("--grpc-port", type=click.IntRange(-1, 65535), default=4317, show_default=True,
              help="OTLP/gRPC port; -1 to disable.")
@click.option("--token", envvar="LOUSHO_TOKEN", default=None,
              help="Bearer token every endpoint but /healthz requires [env LOUSHO_TOKEN]; prefer "
                   "--token-file or the variable: a flag shows in the process list.")
@click.option("--token-file", type=click.Path(path_type=Path), default=None,
              help="Read the bearer token from this file (one line) at start.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Beyond loopback: a Host name clients use to reach the daemon (any port); requests "
                   "under other names get 403. Repeatable; none: any name.")
@click.option("--tls-cert", type=click.Path(path_type=Path), default=None,
              help="PEM certificate: serve HTTPS and gRPC over TLS (with --tls-key).")
@click.option("--tls-key", type=click.Path(path_type=Path), default=None,
              help="PEM private key of --tls-cert.")
@click.option("--header-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds a client has to send a request's headers before it is disconnected.")
@click.option("--body-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds a client has to send a request's body (408 after).")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=15.0, show_default=True,
              help="On SIGTERM, seconds requests in flight get to finish before they are cancelled.")
@click.option("--max-body-mib", type=click.IntRange(min=1), default=64, show_default=True,
              help="Request body limit, after decompression (413 above it).")
@click.option("--queue-mib", type=click.FloatRange(min=1), default=256, show_default=True,
              help="Memory for accepted requests waiting for the loader (past it they are read back from the "
                   "spool), and for bodies being read (past it 503 + Retry-After).")
@click.option("--spool-mib", type=click.FloatRange(min=0.001), default=None,
              help="The spool's bound: accepted bodies on disk until loaded and checkpointed; past it 503 + "
                   "Retry-After [default: a quarter of the free disk, 64 MiB to 4 GiB].")
@click.option("--spool-dir", type=click.Path(path_type=Path), default=None,
              help="The spool's directory [default: beside --db, named DB.spool].")
@click.option("--read-wait", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds a query waits for the spans acked before it to be loaded (read your acks); the "
                   "answer's x-lousho-lag-ms says how far behind it is when the wait ran out.")
@click.option("--load-interval", type=click.FloatRange(min=0), default=0.01, hidden=True,
              help="Seconds of accepted requests the loader appends in one transaction.")
@click.option("--loader-nice", type=click.IntRange(0, 19), default=10, show_default=True,
              help="How far below the request path the loader and DuckDB's threads run (Linux nice): acks come "
                   "first under load, the spool holds what waits. 0 runs them level.")
@click.option("--sql-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds before a SQL query is stopped.")
@click.option("--sql-workers", type=click.IntRange(min=1), default=4, show_default=True,
              help="SQL queries run at once (as many more wait; beyond that 503 + Retry-After).")
@click.option("--sql-max-query-kib", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Longest SQL query text accepted, in KiB (413 above it, before anything parses it).")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="DuckDB's memory limit for the store, e.g. 2GiB or 512MiB (a query past it gets "
                   "LOUSHO_SQL_OUT_OF_MEMORY) [default: 25% of RAM, at most 4GiB].")
@click.option("--sql-query-memory", default=None, metavar="SIZE",
              help="Memory one SQL answer may hold, e.g. 256MiB [default: the memory limit / (2 x --sql-workers)].")
@click.option("--memory-cap", default=None, metavar="SIZE|off",
              help="Writable memory the daemon's process may map: a query building one value past it (DuckDB does "
                   "not count single values against --memory-limit) fails with LOUSHO_SQL_OUT_OF_MEMORY instead of "
                   "getting the daemon killed [default: 3 x --memory-limit + 4GiB, at most 3/4 of RAM; at least "
                   "--memory-limit + 1GiB].")
@click.option("--send-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds a client may read nothing of an answer before it is cut off.")
@click.option("--commit-delay", type=float, default=0.0, hidden=True,
              help="Fault point: pause before each commit (backpressure tests and demos).")
@click.option("--dedup-window", type=click.IntRange(min=1), default=2 * 1024 * 1024, hidden=True,
              help="Span keys held in memory to drop re-sent spans; older re-sends are removed by compaction.")
@click.option("--agent", "agents", multiple=True, metavar="NAME=DIR:CHECK_MODULE",
              help="Register an agent for the self-healing loop: a score regression on its live revision "
                   "starts one `lousho improve DIR --check CHECK_MODULE --apply` (in the loop's mode, auto "
                   "by default). DIR is its harness directory; CHECK_MODULE defines check() and, for an "
                   "agent lousho did not build, probe(). Both are checked at start. Repeatable.")
@click.option("--model-url", envvar="LOUSHO_MODEL_URL", default=None,
              help="The agent's model for the cycles' probes when CHECK_MODULE has no probe(): an "
                   "OpenAI-compatible base URL [env LOUSHO_MODEL_URL].")
@click.option("--model", "model_name", envvar="LOUSHO_MODEL", default=None,
              help="The agent's model name [env LOUSHO_MODEL].")
@click.option("--editor-model-url", envvar="LOUSHO_EDITOR_MODEL_URL", default=None,
              help="The editors' endpoint in the cycles (default: --model-url) [env LOUSHO_EDITOR_MODEL_URL].")
@click.option("--editor-model", envvar="LOUSHO_EDITOR_MODEL", default=None,
              help="The editors' model in the cycles (default: --model) [env LOUSHO_EDITOR_MODEL].")
@click.option("--cycle-retry", type=click.FloatRange(min=0.01), default=30.0, show_default=True,
              help="Seconds before a cycle that failed before its step (bad directory, model down) is "
                   "retried for the same regression; doubles each time, up to 15 minutes.")
@click.option("--recover-store", default=None, metavar="sqlite:///PATH",
              help="The recover part's run store; the page at / shows its pending and quarantined runs "
                   "and the outage state (read-only).")
@click.option("--trigger", "trigger_rule", type=click.Choice(["cusum", "seed"]), default="cusum", show_default=True,
              help="The regression detector: `cusum` (every run of the live revision in order, against a "
                   "reference of its first runs; threshold calibrated to --trigger-budget) or `seed` (the newest "
                   "20 scored runs against the 20 before them at each look, no stated false-trigger rate).")
@click.option("--trigger-drop", type=click.FloatRange(min=0.01, max=0.9), default=0.1, show_default=True,
              help="The pass-rate drop the CUSUM looks for (p1 = p0 - drop).")
@click.option("--trigger-budget", type=click.FloatRange(min=1e-4, max=0.5), default=0.05, show_default=True,
              help="P(a false trigger) per week with no change, split evenly across the registered agents.")
@click.option("--trigger-runs-per-day", type=click.FloatRange(min=1.0), default=None,
              help="The agents' scored runs a day, for the CUSUM's calibration (default: observed over each "
                   "revision's reference).")
@click.option("--trigger-reference-runs", type=click.IntRange(min=1), default=1000, hidden=True,
              help="Runs in a revision's reference before its CUSUM may fire (tests and demos only lower it).")
@click.option("--trigger-reference-hours", type=click.FloatRange(min=0.0), default=24.0, hidden=True,
              help="Hours a revision's reference must span (a day: its daily cycle inside).")
@click.option("--trigger-settle", type=click.FloatRange(min=0.0), default=30.0, hidden=True,
              help="Seconds after a run ended before the CUSUM counts it (its verdict had time to arrive).")
@click.option("--trigger-interval", type=click.FloatRange(min=0.01), default=5.0, hidden=True,
              help="Seconds between the regression trigger's looks at each registered agent.")
@click.option("--lake", "lake", envvar="LOUSHO_LAKE", default=None, metavar="CATALOG",
              help="Also commit what this daemon stores to a DuckLake: a Postgres URL (many daemons, one lake) or a "
                   "catalog file; with --lake-data [env LOUSHO_LAKE].")
@click.option("--lake-data", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Where the lake's Parquet files go (shared by every daemon of the lake).")
@click.option("--lake-name", default=None, metavar="NAME",
              help="This daemon's name in the lake (its positions are kept under it; one live daemon per name)  "
                   "[default: the name the store shipped under, else host:store path]")
@click.option("--lake-every", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between commits to the lake.")
@click.option("--lake-python", default=None, metavar="PATH",
              help="The lake environment's Python (DuckDB 1.5.5 with DuckLake)  [default: $LOUSHO_LAKE_PYTHON, "
                   "else .venv-lake beside lousho's environment]")
@click.option("--lake-upkeep-every", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds between the lake's upkeep (small files merged, old snapshots expired), run by the one "
                   "daemon of the fleet holding its lease.")
@click.option("--lake-retention-days", type=click.FloatRange(min=0.0), default=7.0, show_default=True,
              help="Days the lake keeps old snapshots (time travel) before the upkeep expires them.")
@click.option("--local-days", type=click.FloatRange(min=0.0, min_open=True), default=None, metavar="DAYS",
              help="In a fleet: the local store keeps this many days of traces; older ones leave it once the lake "
                   "holds them  [default: keep everything]")
@click.option("--local-prune-every", type=click.FloatRange(min=0.05), default=3600.0, hidden=True,
              help="Seconds between looks for traces past --local-days (each rebuilds the kept runs).")
@click.option("--lake-sql-timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds a query of the lake may run (scope=lake, the trigger's reads and the page over the lake).")
@click.option("--page-scope", type=click.Choice(["local", "lake"]), default="local", show_default=True,
              help="What the page at / shows: this daemon's store, or in a fleet every daemon's runs (the lake).")
@click.option("--improve-switch", envvar="LOUSHO_IMPROVE", default="on", hidden=True,
              help="`off` stops the regression trigger from starting cycles [env LOUSHO_IMPROVE].")
def observe(
    db: Path, host: str, port: int, grpc_port: int, token: str | None, token_file: Path | None,
    allowed_hosts: tuple[str, ...], tls_cert: Path | None, tls_key: Path | None,
    header_timeout: float, body_timeout: float, shutdown_timeout: float, max_body_mib: int,
    queue_mib: float, spool_mib: float | None, spool_dir: Path | None, read_wait: float, load_interval: float,
    loader_nice: int, sql_timeout: float, sql_workers: int, sql_max_query_kib: int, memory_limit: str | None,
    sql_query_memory: str | None, memory_cap: str | None, send_timeout: float, commit_delay: float, dedup_window: int,
    agents: tuple[str, ...],
    recover_store: str | None, trigger_interval: float, improve_switch: str, model_url: str | None,
    model_name: str | None, editor_model_url: str | None, editor_model: str | None, cycle_retry: float,
    trigger_rule: str = "cusum", trigger_drop: float = 0.1, trigger_budget: float = 0.05,
    trigger_runs_per_day: float | None = None, trigger_reference_runs: int = 1000,
    trigger_reference_hours: float = 24.0, trigger_settle: float = 30.0,
    lake: str | None = None, lake_data: Path | None = None, lake_name: str | None = None, lake_every: float = 2.0,
    lake_python: str | None = None, lake_upkeep_every: float = 600.0, lake_retention_days: float = 7.0,
    local_days: float | None = None, local_prune_every: float = 3600.0, page_scope: str = "local",
    lake_sql_timeout: float = 120.0,
    wiring: Wiring | None = None,
) -> None:
    """Run the observe daemon: OTLP in (HTTP and gRPC), DuckDB store, SQL out."""
    from lousho.observe.daemon import serve
    from lousho.observe.trigger.cycle import CycleModels, TriggerConfig, parse_agents
    from lousho.observe.trigger.detector import CusumConfig

    wiring = wiring or Wiring()
    if token and click.get_current_context().get_parameter_source("token") is ParameterSource.COMMANDLINE:
        click.echo("lousho observe: warning: --token on the command line is visible to every user of this machine "
                   "in the process list; use --token-file or LOUSHO_TOKEN instead", err=True)
    if lake and "@" in lake and urllib.parse.urlsplit(lake).password and \
            click.get_current_context().get_parameter_source("lake") is ParameterSource.COMMANDLINE:
        click.echo("lousho observe: warning: the password in --lake is visible to every user of this machine in "
                   "the process list; use LOUSHO_LAKE, a --config file or ~/.pgpass instead", err=True)
    # Checked before serve(): a bad --agent is a usage error before any port is bound or file created.
    specs = parse_agents(agents)
    for spec in specs:
        wiring.check_agent(spec)
    models = CycleModels(model_url, model_name, editor_model_url, editor_model)
    for url in models.urls():
        wiring.check_model_url(url)
    trigger = TriggerConfig(agents=specs, interval_s=trigger_interval,
                            improve_off=improve_switch.strip().lower() == "off", models=models,
                            retry_base_s=cycle_retry, rule=trigger_rule, settle_s=trigger_settle,
                            cusum=CusumConfig(drop=trigger_drop, reference_runs=trigger_reference_runs,
                                              reference_hours=trigger_reference_hours, weekly_budget=trigger_budget,
                                              agents=max(1, len(specs)), runs_per_day=trigger_runs_per_day))
    config = DaemonConfig(
        db=db, host=host, port=port, grpc_port=None if grpc_port < 0 else grpc_port,
        token=_token(token, token_file), allowed_hosts=allowed_hosts,
        tls_cert=tls_cert, tls_key=tls_key, header_timeout_s=header_timeout,
        body_timeout_s=body_timeout, shutdown_timeout_s=shutdown_timeout,
        max_body_bytes=max_body_mib * MIB, queue_bytes=int(queue_mib * MIB),
        spool_bytes=int(spool_mib * MIB) if spool_mib is not None else None, spool_dir=spool_dir,
        read_wait_s=read_wait, load_interval_s=load_interval, loader_nice=loader_nice,
        sql_timeout_s=sql_timeout, sql_workers=sql_workers, commit_delay_s=commit_delay,
        dedup_window=dedup_window, sql_max_query_bytes=sql_max_query_kib * 1024,
        memory_limit_bytes=_size("--memory-limit", memory_limit),
        sql_query_memory_bytes=_size("--sql-query-memory", sql_query_memory), send_timeout_s=send_timeout,
        memory_cap_bytes=_cap_size(memory_cap),
        lake_catalog=lake, lake_data=lake_data, lake_name=lake_name, lake_every_s=lake_every, lake_python=lake_python,
        lake_upkeep_every_s=lake_upkeep_every, lake_retention_s=lake_retention_days * 86_400,
        local_days=local_days, local_prune_every_s=local_prune_every, page_scope=page_scope,
        lake_sql_timeout_s=lake_sql_timeout,
    )
    # Built before serve(), like the checks above: a bad --recover-store is a usage error before any bind.
    page = wiring.make_page(config, specs, recover_store) if wiring.make_page is not None else None
    if config.memory_cap is not None:
        _apply_cap(config.memory_cap, config.memory_limit)
    serve(config, announce=lambda line: click.echo(line), trigger=trigger, page=page)


def _cap_size(text: str | None) -> int | None:
    """``--memory-cap``: a size of at least ``memory_cap.MIN_CAP``, or ``off`` (0: no cap)."""
    if text is not None and text.strip().lower() in ("off", "none", "0"):
        return 0
    value = _size("--memory-cap", text)
    if value is not None and value < memory_cap.MIN_CAP:
        raise click.BadParameter(f"{text!r} is below {memory_cap.MIN_CAP // MIB}MiB: the daemon itself maps more",
                                 param_hint="--memory-cap")
    return value


def _apply_cap(limit: int, memory_limit: int) -> None:
    """Cap this process (the daemon's own, never one embedding ``serve``), leaving it room to start, and DuckDB
    room for its working memory: a cap below that would refuse DuckDB's own work before its limit does."""
    if limit < memory_limit + memory_cap.MIN_CAP:
        raise click.BadParameter(f"{limit // MIB}MiB leaves DuckDB's --memory-limit ({memory_limit // MIB}MiB) "
                                 f"less than {memory_cap.MIN_CAP // MIB}MiB to spare", param_hint="--memory-cap")
    mapped = memory_cap.data_bytes()
    if mapped is not None and mapped + memory_cap.MIN_CAP > limit:
        raise click.BadParameter(f"{limit // MIB}MiB leaves the daemon too little room: it maps {mapped // MIB}MiB "
                                 "before it has started", param_hint="--memory-cap")
    memory_cap.apply(limit)


_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3}


def _size(flag: str, text: str | None) -> int | None:
    """``2GiB``, ``512MiB``, ``1.5GB`` or a byte count, as bytes; None for None."""
    if text is None:
        return None
    number = text.strip().rstrip("bBiIkKmMgG")
    unit = text.strip()[len(number):].lower()
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise click.BadParameter(f"{text!r} is not a size (e.g. 512MiB, 2GiB)", param_hint=flag) from None
    if value < 16 * MIB:
        raise click.BadParameter(f"{text!r} is below 16MiB", param_hint=flag)
    return int(value)


def wired(wiring: Wiring) -> click.Command:
    """``lousho observe`` given ``wiring``; the command itself, options and help, is unchanged."""
    command = copy.copy(observe)
    command.callback = functools.partial(observe.callback, wiring=wiring)  # type: ignore[arg-type]
    return command
