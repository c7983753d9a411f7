"""The run store's tables, in SQL that SQLite and Postgres both run, with append-only migrations.

``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``. A released migration is never edited: a change
is a new entry at the end. Each store applies the missing ones in one write transaction and records each in
``schema_migrations``, so two processes opening a new file at once apply them once.

Portability rules (the Postgres store shares this module):

- Types are TEXT, INTEGER and REAL only. Timestamps are TEXT in one fixed-width UTC format (``store.utc_now``:
  ``2026-05-01T12:00:00.000000Z``), so they sort and compare as strings in both databases; REAL would be a 4-byte
  float in Postgres (about 100 s of precision on an epoch), and INTEGER is 4 bytes there (no epoch milliseconds).
- JSON is stored as TEXT, encoded by the store (sorted keys); a row that does not decode raises
  ``CheckpointCorrupt``. No JSON operators in SQL.
- No AUTOINCREMENT, no WITHOUT ROWID, no partial indexes, no ``INSERT OR ...``: upserts are
  ``ON CONFLICT (...) DO NOTHING``, which both accept.
"""

from __future__ import annotations

RUN_STATUSES = ("running", "interrupted", "awaiting_approval", "finished", "failed", "stopped", "quarantined")
RUN_KINDS = ("send", "turn")
APPROVAL_STATUSES = ("pending", "approved", "denied")
APPROVAL_KINDS = ("tool", "question", "sign-in")


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
)
"""

_RUNS = f"""
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN {_in(RUN_KINDS)}),
    status TEXT NOT NULL CHECK (status IN {_in(RUN_STATUSES)}),
    input TEXT NOT NULL,                 -- JSON
    output TEXT,                         -- JSON, set when the run finishes
    attempts INTEGER NOT NULL DEFAULT 0, -- executions begun: start counts 1, each resume 1 more
    consecutive_failures INTEGER NOT NULL DEFAULT 0,  -- reset by every saved step (progress)
    last_error TEXT,                     -- JSON {{message, code, category, retryable}}
    next_attempt_at TEXT,
    lease_owner TEXT,
    lease_expiry TEXT,
    lease_epoch INTEGER NOT NULL DEFAULT 0,  -- fencing token: only bump_epoch and resume raise it
    healed_from TEXT,
    note TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)
"""

# One row per completed step: the row is both the output and the done marker, so they commit together.
_CHECKPOINTS = """
CREATE TABLE checkpoints (
    run_id TEXT NOT NULL REFERENCES runs (id),
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    output TEXT NOT NULL,  -- JSON
    saved_at TEXT NOT NULL,
    epoch INTEGER NOT NULL,  -- the lease epoch of the writer that saved it
    PRIMARY KEY (run_id, step)
)
"""

# Versions 1-2: a ring per run, at most ``history_limit`` rows, one per slot; a save wrote slot
# ``seq % history_limit`` in place. Replaced by a view in version 3 (``HISTORY_VIEW``).
_HISTORY = """
CREATE TABLE checkpoint_history (
    run_id TEXT NOT NULL REFERENCES runs (id),
    slot INTEGER NOT NULL,
    seq INTEGER NOT NULL,  -- counts the run's saves: orders the ring, newest first
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    output TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (run_id, slot)
)
"""

_APPROVALS = f"""
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id),
    tool_call_id TEXT,
    tool_name TEXT,
    args TEXT,  -- JSON
    kind TEXT NOT NULL CHECK (kind IN {_in(APPROVAL_KINDS)}),
    status TEXT NOT NULL CHECK (status IN {_in(APPROVAL_STATUSES)}),
    created_at TEXT NOT NULL,
    resolved_at TEXT
)
"""

_SESSIONS = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    transcript TEXT NOT NULL,  -- JSON list of messages
    turns INTEGER NOT NULL,
    pending_turn TEXT,         -- run id of the turn in flight, or NULL
    version INTEGER NOT NULL,  -- optimistic concurrency: a save names the version it read
    updated_at TEXT NOT NULL
)
"""

# The provider-outage breaker of the recover loop (seed 000 "Provider outages"), shared by every replica: one row,
# id 'provider'. Its state lives here rather than in memory so that all replicas pause together, and the probe
# slot is a reservation with an expiry (recovery-anchors §4, §9.5: a half-open breaker held in memory lets every
# replica probe at once; a reservation whose holder died must free itself).
_OUTAGE = """
CREATE TABLE recover_outage (
    id TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,  -- provider failures in a row, across runs and replicas; any other outcome resets it
    paused_since TEXT,          -- NULL while closed; when the pause began, while open
    probes INTEGER NOT NULL,    -- probes that failed since the pause began: each waits twice as long as the last
    next_probe_at TEXT,         -- no probe starts before this
    probe_owner TEXT,           -- the replica holding the probe slot: one probe at a time across replicas
    probe_run TEXT,             -- the run it probes with
    probe_expiry TEXT,          -- the slot frees itself then, should its holder die; the holder renews it
    last_error TEXT,            -- JSON {message, code, category, retryable}: the failure that began the pause
    updated_at TEXT NOT NULL
)
"""

# Version 3: the history ring becomes a view of ``checkpoints``, so a step is one row written once instead of two
# (the ring duplicated every checkpoint: issue 18). Each checkpoint row keeps the history limit of the store that
# saved it (0: not in the history), and the view keeps the ring's rule: numbering a run's saves 1, 2, ... (``seq``,
# in step order, the order a run saves them in), a save numbered ``m`` by a store keeping ``L`` entries pushes out
# every entry numbered ``m - L`` or lower, so an entry is in the history while its number is above every save's
# ``seq - history_limit``. With one limit that is the newest ``L`` saves, as the ring kept; after a limit was
# changed, the same entries the ring would have kept.
HISTORY_VIEW = """
CREATE VIEW checkpoint_history AS
SELECT run_id, seq, step, name, output, saved_at, epoch FROM (
    SELECT run_id, seq, step, name, output, saved_at, epoch, history_limit,
           MAX(CASE WHEN history_limit > 0 THEN seq - history_limit END) OVER (PARTITION BY run_id) AS pushed_out
    FROM (
        SELECT run_id, step, name, output, saved_at, epoch, history_limit,
               ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY step) AS seq
        FROM checkpoints
    ) numbered
) ring
WHERE history_limit > 0 AND seq > pushed_out
"""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _RUNS,
        # The recover loop's query (unfinished runs due now). No index by agent: each index is one more page to
        # write on every run start and status change, and listing by agent is a rare, person-driven query.
        "CREATE INDEX runs_by_status ON runs (status, next_attempt_at)",
        _CHECKPOINTS,
        _HISTORY,
        _APPROVALS,
        "CREATE INDEX approvals_by_run ON approvals (run_id, status)",
        _SESSIONS,
    ),
    (
        _OUTAGE,
        # The one row, so that every breaker write is an UPDATE of a row that exists (no insert race).
        "INSERT INTO recover_outage (id, failures, probes, updated_at) "
        "VALUES ('provider', 0, 0, '1970-01-01T00:00:00.000000Z')",
    ),
    (
        "ALTER TABLE checkpoints ADD COLUMN history_limit INTEGER NOT NULL DEFAULT 0",
        # The entries the ring held stay in the history: marked with the default limit (50), none of them is pushed
        # out by the others (a ring holds at most its limit), and steps the ring had dropped stay out (0).
        "UPDATE checkpoints SET history_limit = 50 WHERE EXISTS (SELECT 1 FROM checkpoint_history h "
        "WHERE h.run_id = checkpoints.run_id AND h.step = checkpoints.step)",
        "DROP TABLE checkpoint_history",
        HISTORY_VIEW,
    ),
)

LATEST = len(MIGRATIONS)
