"""``lousho recover``: run the recover loop in the foreground until SIGTERM or SIGINT (exit 0).

The first signal lets the run in hand finish, then exits 0; a second one exits at once, and that run's lease
lapses so that another replica takes it over.

Mounted by the CLI's owner (``lousho.recover.recover_cli:recover_command``). The app is named ``MODULE:OBJ``:
an object with ``resume(run_id, epoch)``, such a function, or a class whose no-argument instances have it (see
``loop.RecoverApp``). The current directory is importable, as for ``python -m``.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from lousho.recover.cli import store_option
from lousho.recover.errors import AppInvalid
from lousho.recover.lease import LEASE_SECONDS
from lousho.recover.loop import recover
from lousho.recover.store import RunRecord
from lousho.recover.store import open as open_store

log = logging.getLogger("lousho.recover.cli")


def load_app(spec: str) -> Callable[[str, int], object] | Any:
    """The app ``MODULE:OBJ`` names (``OBJ`` may be dotted: ``pkg.mod:Factory.app``)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AppInvalid(spec, "expected MODULE:OBJ")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise AppInvalid(spec, f"cannot import {module_name}: {e}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AppInvalid(spec, f"{module_name} has no {attribute}")
        target = getattr(target, part)
    if isinstance(target, type):
        try:
            target = target()
        except Exception as e:  # deliberate: a factory that fails is one clear usage error
            raise AppInvalid(spec, f"{attribute}() failed: {type(e).__name__}: {e}") from None
    if callable(getattr(target, "resume", None)) or callable(target):
        return target
    raise AppInvalid(spec, f"{attribute} has no resume(run_id, epoch) and is not callable")


def _configure_logging(level: str) -> None:
    """Decisions (``lousho.recover``) and callbacks (``lousho.recover.cli``) to stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("lousho.recover")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


@click.command("recover")
@click.option("--app", "app_spec", required=True, metavar="MODULE:OBJ",
              help="What resumes a run: OBJ.resume(run_id, epoch), a function of (run_id, epoch), or a class.")
@store_option
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds between ticks; also the backoff's base.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=10, show_default=True,
              help="Failures in a row that quarantine a run.")
@click.option("--retry-with-diagnosis", is_flag=True,
              help="Give a run at the cap one more try as a <id>.heal fork with a note saying why it failed.")
@click.option("--lease-seconds", type=click.FloatRange(min=0, min_open=True), default=LEASE_SECONDS,
              show_default=True, help="How long a claimed run stays this process's without a heartbeat.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info", show_default=True)
def recover_command(app_spec: str, store_url: str, interval: float, max_attempts: int, retry_with_diagnosis: bool,
                    lease_seconds: float, log_level: str) -> None:
    """Resume interrupted runs of the store until SIGTERM or SIGINT; any number of processes may run it."""
    app = load_app(app_spec)
    # An app that opens the run store itself must open the one this loop recovers.
    use_store_url = getattr(app, "use_store_url", None)
    if callable(use_store_url):
        use_store_url(store_url)
    _configure_logging(log_level)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():  # a second signal: go now; the run in hand goes to another replica when its lease lapses
            log.warning("received %s again: exiting without finishing the run in hand", name)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        log.info("received %s: finishing the run in hand, then stopping (again to exit at once)", name)
        stop.set()

    def on_quarantined(run: RunRecord) -> None:
        error = run.last_error or {}
        log.warning("on_quarantined run=%s failures=%d code=%s: a person decides (lousho runs resume %s)", run.id,
                    run.consecutive_failures, error.get("code"), run.id)

    def on_error(error: BaseException) -> None:
        log.error("on_error %s: %s", type(error).__name__, error)

    store = open_store(store_url)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        handle = recover(
            store, app, interval=interval, max_attempts=max_attempts, retry_with_diagnosis=retry_with_diagnosis,
            lease_seconds=lease_seconds, stop_event=stop,
            on_recovered=lambda run_id: log.info("on_recovered run=%s", run_id),
            on_quarantined=on_quarantined,
            on_outage=lambda paused: log.warning("on_outage paused=%s: %s", paused,
                                                 "provider outage, recovery paused" if paused else "resuming"),
            on_error=on_error,
        )
        log.info("recovering runs of %s every %g s as %s", store.location, interval, handle.loop.owner)
        while not handle.join(timeout=0.5):  # short waits, so the main thread gets to run the signal handler
            pass
        log.info("stopped")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()
