"""Run the observe daemon: store, writer, OTLP/HTTP + SQL on one port, OTLP/gRPC on another.

SIGTERM or SIGINT: stop listening, let requests in flight finish (they wait for the spool's sync) for up
to the shutdown timeout, then cancel the rest (a client still sending its body gets no answer; it was
never acked), load whatever the spool holds, checkpoint DuckDB, delete the loaded spool segments, exit 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import uvicorn

from lousho.kernel._listen import listen_tcp
from lousho.observe import tls_dates
from lousho.observe.config import DaemonConfig
from lousho.observe.decode.otlp_json_native import NAME as JSON_DECODER
from lousho.observe.decode.otlp_native import NAME as DECODER
from lousho.observe.errors import StoreDiskFull, bind_error
from lousho.observe.lake.lake_client import LakeTarget
from lousho.observe.lake.lake_query import LakeReader
from lousho.observe.metrics import Metrics
from lousho.observe.receive.grpc_server import start_grpc
from lousho.observe.receive.http_app import PageFactory, build_app
from lousho.observe.receive.http_protocol import protocol_with_header_timeout
from lousho.observe.sql.query import QueryResult
from lousho.observe.store.span_store import SpanStore
from lousho.observe.store.writer import Writer
from lousho.observe.trigger.cycle import Trigger, TriggerConfig

logger = logging.getLogger("lousho.observe")
# At a stop, how long the last rows may take to reach the lake before its process is stopped (they stay in the
# local store and ship at the next start).
LAKE_FLUSH_AT_EXIT_S = 10.0


@dataclass(frozen=True)
class Listening:
    http_port: int
    grpc_port: int | None

    def line(self, config: DaemonConfig) -> str:
        grpc_part = f" grpc={config.host}:{self.grpc_port}" if self.grpc_port else ""
        return (
            f"lousho observe ready http={config.scheme}://{_url_host(config.host)}:{self.http_port}"
            f"{grpc_part} db={config.db} decoder={DECODER} json_decoder={JSON_DECODER}"
            + (f" lake={LakeTarget(config.lake_catalog, '').describe()}" if config.lake_catalog else "")
        )


def serve(config: DaemonConfig, announce=print, trigger: TriggerConfig | None = None,
          page: PageFactory | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then drain and return. ``announce`` gets the ready line.
    With registered agents in ``trigger``, the regression trigger watches them meanwhile; ``page``
    builds the app served beside the API (the CLI passes the web page's)."""
    config.validate()
    metrics = Metrics(decoder=DECODER, json_decoder=JSON_DECODER)
    if config.tls_cert is not None:
        dates = tls_dates.read(config.tls_cert)
        metrics.tls_not_after = dates.not_after
        warning = tls_dates.expiry_warning(config.tls_cert, dates)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
    store = SpanStore(config.db, on_damage=metrics.mark_store_damaged, dedup_window=config.dedup_window,
                      memory_limit=f"{config.memory_limit}B", background_nice=config.loader_nice)
    shipper = lake_reader = None
    if config.lake_catalog is not None and config.lake_data is not None:
        # Loaded only with a lake: the shipper brings psycopg, a tenth of a second a start without one.
        from lousho.observe.lake.lake_shipper import LakeShipper, default_name

        target = LakeTarget(config.lake_catalog, str(config.lake_data))
        # Before the writer: its replay of the spool commits at once, and no commit may take a number the lake
        # already holds for this daemon (the shipper raises the store's floor to its position).
        try:
            # Without --lake-name: the name the store shipped under before, else this host's default.
            shipper = LakeShipper(target, store.reader, config.lake_name,
                                  derived=default_name(str(config.db.resolve())), raise_floor=store.raise_commit_seq,
                                  every_s=config.lake_every_s,
                                  python=config.lake_python, upkeep_every_s=config.lake_upkeep_every_s,
                                  retention_s=config.lake_retention_s)
        except BaseException:
            store.close()
            raise
        lake_reader = LakeReader(target, config.lake_python, processes=config.sql_workers)
        metrics.lake_state = shipper.state
    try:
        writer = Writer(store, metrics, capacity_bytes=config.queue_bytes, spool_dir=config.spool_dir,
                        spool_bytes=config.spool_bytes, load_interval_s=config.load_interval_s,
                        commit_delay=config.commit_delay_s, nice=config.loader_nice)
    except BaseException:
        if shipper is not None:
            shipper.close(flush_timeout_s=0)
        store.close()
        raise
    if shipper is not None:
        if config.local_days is not None:
            # Nothing leaves while the shipper does not hold its lake name (shipped() is 0 then).
            writer.keep_window(config.local_days, shipper.shipped, config.local_prune_every_s)
        shipper.start()

    def reader() -> duckdb.DuckDBPyConnection:
        # Read your acks: a query sees every request acked before it arrived (or waits read_wait_s).
        writer.wait_loaded(config.read_wait_s)
        return store.reader()

    sock = _bind(config.host, config.port)
    grpc_server = None
    grpc_port = None
    watcher = None
    try:
        if trigger is not None and trigger.agents:
            # The cycle reads this daemon: its failed runs become cases and its monitor reads live runs.
            url = f"{config.scheme}://{_url_host(config.host)}:{sock.getsockname()[1]}"
            fleet: dict[str, Any] = {}
            if shipper is not None:
                # In a fleet the trigger, and the cycles it starts, read every daemon's runs in the lake, and one
                # daemon at a time watches each agent (its lease in the catalog).
                url += "?scope=lake"
                fleet = {"query": trigger_lake_query(config), "lease": shipper.leases.try_hold}
            watcher = Trigger(dataclasses.replace(trigger, observe_url=url, observe_token=config.token,
                                                  observe_ca_cert=config.tls_cert), store.reader, **fleet,
                              sql_timeout_s=config.sql_timeout_s,
                              on_poll=lambda: metrics.add(trigger_polls=1),
                              on_reading=lambda name, r: metrics.set_detector(
                                  name, r.revision or "", r.statistic, r.threshold, r.reference_runs,
                                  r.reference_needed))
            watcher.start()
        if config.grpc_port is not None:
            grpc_server, grpc_port = start_grpc(config, writer, metrics)
        app = build_app(config, writer, metrics, store.reader, page=page(reader) if page else None,
                        lake=lake_reader, lake_sync=shipper.wait_shipped if shipper is not None else None)
        server = _Server(
            uvicorn.Config(
                app,
                http=protocol_with_header_timeout(config.header_timeout_s, config.send_timeout_s),
                log_level="warning",
                lifespan="off",
                access_log=False,
                timeout_keep_alive=30,
                # No limit_concurrency: uvicorn counts open connections, idle ones included, so a
                # thousand idle sockets made every request 503, /healthz too. Connections are bounded
                # by the header and body timeouts, request memory by the writer's byte budget.
                limit_concurrency=None,
                timeout_graceful_shutdown=config.shutdown_timeout_s,  # type: ignore[arg-type]
                ssl_certfile=config.tls_cert,
                ssl_keyfile=config.tls_key,
            )
        )
        listening = Listening(sock.getsockname()[1], grpc_port)
        threading.Thread(
            target=_announce_when_started, args=(server, listening, config, announce), daemon=True
        ).start()
        server.run(sockets=[sock])
    finally:
        # Each step on its own: one that fails (a lake that stopped answering, a store's error) is logged and never
        # skips the rest; the store is closed whatever happened before.
        if watcher is not None:
            # Before the store closes: the trigger reads it.
            _step("stopping the trigger", watcher.stop)
        if grpc_server is not None:
            # In-flight exports finish (the writer still runs); new ones are refused.
            _step("stopping gRPC", lambda: grpc_server.stop(grace=config.shutdown_timeout_s).wait())
        _step("closing the writer", writer.close)
        if shipper is not None:
            # What the loader took last goes to the lake too, bounded: past it the lake's process is stopped and the
            # rest goes at the next start.
            _step("closing the lake's shipper", lambda: shipper.close(flush_timeout_s=LAKE_FLUSH_AT_EXIT_S))
        if lake_reader is not None:
            _step("closing the lake's readers", lake_reader.close)
        _step("checkpointing the store", lambda: _checkpoint(store, writer))
        _step("closing the store", store.close)
        sock.close()
    logger.info("drained and closed %s", config.db)


def _step(what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:  # deliberate: the daemon's shutdown goes on to close the store
        logger.exception("%s at exit failed", what)


def _checkpoint(store: SpanStore, writer: Writer) -> None:
    try:
        if store.checkpoint():
            writer.release_spool()  # what the store now holds in its file; the rest replays at the next start
    except StoreDiskFull as e:  # deliberate: the WAL and the spool keep everything; the next start replays
        logger.warning("no checkpoint at exit: %s", e)


def trigger_lake_query(config: DaemonConfig) -> Callable[[str, list[Any], float], QueryResult]:
    """The trigger's reads of the lake: a read-only lake process of its own (the SQL API's serves queries)."""
    assert config.lake_catalog is not None and config.lake_data is not None
    lake = LakeReader(LakeTarget(config.lake_catalog, str(config.lake_data)), config.lake_python, processes=1)

    def query(sql: str, params: list[Any], timeout_s: float) -> QueryResult:
        return lake.run(sql, params, timeout=max(timeout_s, config.lake_sql_timeout_s), max_rows=2**62)

    return query


class _Server(uvicorn.Server):
    """uvicorn, minus its re-raising of the signal after shutdown: that would kill the process
    before the writer commits what is queued. Here SIGTERM/SIGINT mean drain and exit 0."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: object) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


def _announce_when_started(
    server: uvicorn.Server, listening: Listening, config: DaemonConfig, announce
) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.01)
    if server.started:
        announce(listening.line(config))
        sys.stdout.flush()


def _bind(host: str, port: int) -> socket.socket:
    try:
        sock = listen_tcp(host, port, backlog=1024)
    except OSError as e:
        raise bind_error("HTTP", host, port, e) from None
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
