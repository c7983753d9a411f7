"""What this daemon loaded, committed to the lake behind the local store, exactly once.

The lake is fed from the local store, not from the spool: every local commit stamps its rows with a rising
``commit_seq`` (store/span_store.py), and the shipper commits the rows past the last ``commit_seq`` the lake
holds for this daemon, with that position, in one lake transaction (``lake_client.LakeClient.commit``). So:

- a crash anywhere (before, during or after the lake's commit) loses nothing and doubles nothing: the next start
  reads the daemon's position from the lake and sends what is past it;
- a lake that is down or slow never holds an ack or the spool: the local store keeps taking spans, and the lake
  catches up from it when it answers again;
- batches are sized for Parquet (every ``every_s`` seconds, up to ``max_rows`` span rows a commit), not per
  request.

The local store must never hand a ``commit_seq`` out twice: after a compaction removed the newest commit's rows
the store would number from below the lake's position again, so the shipper raises the store's floor to it.
A span an SDK re-sent after its twin left the local filter's window (or to another daemon) reaches the lake
twice; the local store's compaction removes its own copy, the lake keeps both (docs/observe.md, "The fleet").

Positions are kept per lake name, so a name is one store's for good: the shipper holds an advisory lock on its
name for the daemon's whole life (``lake_lease.NameLease``; a second daemon with the name refuses to start, and
one that lost the lock ships and prunes nothing until it holds it again), and the store keeps the name it ships
under (``lake_identity.lake_name``): without ``--lake-name`` a restart uses it, not a new host's default.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import psycopg
import pyarrow as pa

from lousho.observe.errors import LakeFailed, LakeNameChanged, LakeNameInUse, LakeUnavailable
from lousho.observe.lake import lake_identity, lake_schema
from lousho.observe.lake.lake_client import LakeClient, LakeTarget
from lousho.observe.lake.lake_lease import UPKEEP, FleetLeases, NameLease

logger = logging.getLogger(__name__)

EVERY_S = 2.0
# The lake's upkeep (merging small files, expiring snapshots, deleting the files only they used): this often, by
# whichever daemon holds the lease, keeping the snapshots of the last RETENTION_S for time travel.
UPKEEP_EVERY_S = 600.0
RETENTION_S = 7 * 86_400.0
MAX_ROWS = 250_000
RETRY_S = 5.0
# At close, past the flush's deadline: how long a thread whose lake process was killed gets to notice.
KILLED_WAIT_S = 2.0

_SPANS = (f"SELECT {lake_schema.KEY_HALVES}, {', '.join(lake_schema.SPAN_NAMES)} FROM span_rows "
          "WHERE commit_seq > $after AND commit_seq <= $upto")
_SCORES = (f"SELECT {lake_schema.KEY_HALVES}, {', '.join(lake_schema.SCORE_NAMES)} FROM scores "
           "WHERE commit_seq > $after AND commit_seq <= $upto")
_RESOURCES = ("SELECT resource_key, any_value(resource)::VARCHAR AS resource FROM resources WHERE resource_key IN "
              "(SELECT DISTINCT resource_key FROM span_rows WHERE commit_seq > $after AND commit_seq <= $upto) "
              "GROUP BY resource_key")
# The commits past the position, with their rows, oldest first: where to cut a batch at ``max_rows``.
_COMMITS = ("SELECT commit_seq, count(*) FROM (SELECT commit_seq FROM span_rows WHERE commit_seq > $after "
            "UNION ALL SELECT commit_seq FROM scores WHERE commit_seq > $after) "
            "GROUP BY commit_seq ORDER BY commit_seq")


_NEWEST = ("SELECT greatest((SELECT coalesce(max(commit_seq), 0) FROM span_rows), "
           "(SELECT coalesce(max(commit_seq), 0) FROM scores))")


def default_name(db: str) -> str:
    """A daemon's name in the lake: stable across restarts (its positions are kept under it)."""
    return f"{socket.gethostname()}:{db}"


@dataclass
class ShipperState:
    position: int = 0
    commits: int = 0
    rows: int = 0
    last_error: str | None = None
    last_commit_ns: int = 0
    upkeep_holder: bool = False
    upkeeps: int = 0
    name_held: bool = False


class LakeShipper:
    def __init__(self, target: LakeTarget, reader: Callable[[], duckdb.DuckDBPyConnection], name: str | None, *,
                 raise_floor: Callable[[int], None], every_s: float = EVERY_S, max_rows: int = MAX_ROWS,
                 python: str | None = None, upkeep_every_s: float = UPKEEP_EVERY_S,
                 retention_s: float = RETENTION_S, leases: FleetLeases | None = None,
                 derived: str | None = None) -> None:
        """``name``: the lake name asked for (``--lake-name``), or None for the one the store shipped under, else
        ``derived`` (``default_name``)."""
        con = reader()
        try:
            recorded = lake_identity.lake_name(con)
        finally:
            con.close()
        name = name or recorded or derived
        if not name:
            raise ValueError("a lake name, or a store that shipped under one, or a default")
        self.target, self.name = target, name
        self._reader, self._every_s, self._max_rows, self._python = reader, every_s, max_rows, python
        self._client: LakeClient | None = None
        self.leases = leases if leases is not None else FleetLeases(target.catalog)
        self._upkeep_every_s, self._retention_s = upkeep_every_s, retention_s
        self._upkeep_at = time.monotonic() + upkeep_every_s
        self._stop = threading.Event()
        self._abandoned = threading.Event()  # set at close past the deadline: a late flush sends nothing more
        self._wake = threading.Event()
        self._shipped = threading.Condition()
        self.state = ShipperState()
        # The name first: the position read under it is this store's only while no other daemon ships as it.
        self._name = NameLease(target.catalog, name)
        self._name_session = 0
        try:
            self._take_name()
            # Opened at start: a lake that cannot be reached or migrated is a clear error before any port is bound.
            self._connect()
            assert self._client is not None
            if recorded is not None and recorded != name and self._client.position(recorded) > 0:
                raise LakeNameChanged(f"this store ships to the lake as {recorded!r}, not {name!r}: under a new "
                                      "name it would send every row again",
                                      hint=f"start it without --lake-name, or with --lake-name {recorded!r} "
                                           f"(it asked for {name!r})")
            if recorded != name:
                con = reader()
                try:
                    lake_identity.record_lake_name(con, name)
                finally:
                    con.close()
        except BaseException:
            self._release()
            raise
        raise_floor(self.state.position)
        self._thread = threading.Thread(target=self._run, name="lousho-lake", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _take_name(self) -> None:
        try:
            taken = self._name.take()
        except psycopg.Error as e:
            raise LakeUnavailable(f"the lake's catalog did not answer for the lake name {self.name!r}: {e}") from e
        if not taken:
            raise LakeNameInUse(f"another daemon ships to the lake as {self.name!r}: two stores under one name "
                                "would each skip the other's rows")
        self.state.name_held, self._name_session = True, self._name.taken

    def _check_name(self) -> None:
        """Ship only while holding the name; one that was lost and taken again means reading the position again
        (another daemon may have shipped as it meanwhile)."""
        held = self._name.hold()
        if held and self.state.name_held and self._name.taken == self._name_session:
            return
        self.state.name_held = False
        if self._client is not None:
            self._client.close()
            self._client = None
        if not held:
            raise LakeUnavailable(f"this daemon lost the lake name {self.name!r} (its catalog session ended) and "
                                  "cannot take it again yet: shipping and the local window wait")
        self.state.name_held, self._name_session = True, self._name.taken

    def shipped(self) -> int:
        """The position the local window may prune up to: none while the name is not held."""
        return self.state.position if self.state.name_held else 0

    def _release(self, kill: bool = False) -> None:
        client, self._client = self._client, None  # a thread given up on at close may still hold it
        try:
            if client is not None:
                if kill:
                    client.kill()  # not a wait for a process whose lake stopped answering
                client.close()
        finally:
            self._name.close()
            self.leases.close()

    def _connect(self) -> None:
        client = LakeClient(self.target, python=self._python)
        try:
            client.migrate()
            self.state.position = client.position(self.name)
        except BaseException:
            client.close()
            raise
        self._client = client

    def ship(self) -> int:
        """Commit what the local store holds past the lake's position, in batches; returns the span rows sent."""
        sent = 0
        while not self._abandoned.is_set():
            self._check_name()
            if self._client is None:
                # First the lake's position: a commit whose answer was lost may have gone in (the next batch
                # starts after it, never at the position this process remembers).
                self._connect()
            assert self._client is not None
            after = self.state.position
            batch = self._next_batch()
            if batch is None:
                return sent
            upto, tables = batch
            sent += self._client.commit(self.name, after, upto, tables)
            with self._shipped:
                self.state.position = upto
                self._shipped.notify_all()
            self.state.commits += 1
            self.state.rows += tables["span_batch"].num_rows
            self.state.last_commit_ns = time.time_ns()
        return sent

    def _next_batch(self) -> tuple[int, dict[str, pa.Table]] | None:
        con = self._reader()
        try:
            after = self.state.position
            commits = con.execute(_COMMITS, {"after": after}).fetchall()
            if not commits:
                return None
            upto, rows = commits[0][0], 0
            for seq, count in commits:
                if rows and rows + count > self._max_rows:
                    break
                upto, rows = seq, rows + count
            params = {"after": after, "upto": upto}
            # Relations, not DB-API results: their Arrow answer is not copied once more.
            tables = {"span_batch": con.sql(_SPANS, params=params).to_arrow_table(),
                      "score_batch": con.sql(_SCORES, params=params).to_arrow_table(),
                      "resource_batch": con.sql(_RESOURCES, params=params).to_arrow_table()}
        finally:
            con.close()
        return upto, tables

    def flush(self, timeout_s: float = 30.0) -> None:
        """Ship now (at shutdown, and for a test or a query that must see this daemon's newest rows)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._abandoned.is_set():
            try:
                self.ship()
                return
            except (LakeUnavailable, LakeFailed) as e:
                self._failed(e)
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            except Exception as e:
                # Deliberately broad: the local store's error (or any other) must not skip the daemon's cleanup; the
                # rows stay in the store and ship at the next start.
                logger.warning("shipping to the lake failed; what is left ships at the next start: %s", e)
                return

    def _failed(self, error: Exception) -> None:
        self.state.last_error = str(error)
        logger.warning("committing to the lake failed; retrying from position %d: %s", self.state.position, error)
        if self._client is not None:
            self._client.close()
            self._client = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._every_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.ship()
                self.state.last_error = None
                if time.monotonic() >= self._upkeep_at:
                    self._upkeep_at = time.monotonic() + self._upkeep_every_s
                    self.upkeep()
            except (LakeUnavailable, LakeFailed) as e:
                self._failed(e)
                self._stop.wait(RETRY_S)
            except duckdb.Error as e:  # deliberate: the local store answers again on the next round
                logger.warning("reading the local store for the lake failed: %s", e)
            except Exception as e:
                # Deliberately broad: the thread must outlive one bad round (the position is the lake's, so the next
                # round sends the same rows again); the traceback goes to the daemon's log.
                logger.exception("committing to the lake failed")
                self._failed(e)
                self._stop.wait(RETRY_S)

    def upkeep(self) -> bool:
        """Run the lake's upkeep if this daemon holds the lease (one daemon of the fleet at a time)."""
        self.state.upkeep_holder = self.leases.try_hold(UPKEEP)
        if not self.state.upkeep_holder:
            return False
        if self._client is None:
            self._connect()
        assert self._client is not None
        done = self._client.upkeep(self._retention_s)
        self.state.upkeeps += 1
        logger.info("lake upkeep: %s", done)
        return True

    def wait_shipped(self, timeout_s: float) -> float:
        """Read your acks on the lake: wait (at most ``timeout_s``) until the lake holds everything this daemon's
        store has committed now; returns how far behind the lake still is, in seconds (0 when caught up)."""
        con = self._reader()
        try:
            (newest,) = con.execute(_NEWEST).fetchone() or (0,)
        finally:
            con.close()
        if newest <= self.state.position:
            return 0.0
        started = time.monotonic()
        self.wake()
        with self._shipped:
            caught_up = self._shipped.wait_for(lambda: self.state.position >= newest, timeout_s)
        return 0.0 if caught_up else time.monotonic() - started

    def wake(self) -> None:
        self._wake.set()

    def close(self, flush_timeout_s: float = 30.0) -> None:
        """Stop the thread, ship what is left, close the lake's process: back within ``flush_timeout_s`` (and a few
        seconds) whatever the lake does. Past the deadline the lake's process is killed: exactly once still holds,
        the position goes in with its rows or not at all, and what is left ships at the next start."""
        deadline = time.monotonic() + flush_timeout_s

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        self._stop.set()
        self._wake.set()
        # In a thread of its own: reaching a lake that stopped answering must not hold the daemon's exit.
        flusher = threading.Thread(target=lambda: self.flush(left()), name="lousho-lake-flush", daemon=True)
        try:
            if self._thread.is_alive():
                self._thread.join(left())
            if not self._thread.is_alive() and left() > 0:
                flusher.start()
                flusher.join(left())
            if self._thread.is_alive() or flusher.is_alive():
                logger.warning("the lake did not answer within %gs: its process is stopped, what is left ships at "
                               "the next start", flush_timeout_s)
                self._abandoned.set()
                client = self._client
                if client is not None:
                    client.kill()  # the request waiting on it fails at once
                for thread in (self._thread, flusher):
                    if thread.is_alive():
                        thread.join(KILLED_WAIT_S)
        except Exception:
            logger.exception("closing the lake's shipper")  # deliberate: the daemon's cleanup goes on
        finally:
            try:
                self._release(kill=self._abandoned.is_set())
            except Exception:
                logger.exception("closing the lake's process")  # deliberate: the daemon's cleanup goes on
