"""recover: durable runs, checkpoint stores and the recover() loop."""

from lousho.recover.durable import DurableRun, resume, start
from lousho.recover.errors import (
    ApprovalNotFound,
    CheckpointCorrupt,
    CheckpointNotFound,
    LeaseLost,
    RunAwaitingApproval,
    RunDiverged,
    RunExists,
    RunNotFound,
    RunNotResumable,
    SessionConflict,
    error_from_stored,
    stored_error,
)
from lousho.recover.lease import hold as hold_lease
from lousho.recover.loop import RecoverApp, RecoverHandle, RecoverSettings, RecoveryLoop, TickReport, recover
from lousho.recover.store import DEFAULT_URL, Approval, OutageState, RunStore, Session, StepRecord, StoredRun
from lousho.recover.store import open as open_store

__all__ = [
    "DEFAULT_URL",
    "Approval",
    "ApprovalNotFound",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "DurableRun",
    "LeaseLost",
    "OutageState",
    "RecoverApp",
    "RecoverHandle",
    "RecoverSettings",
    "RecoveryLoop",
    "RunAwaitingApproval",
    "RunDiverged",
    "RunExists",
    "RunNotFound",
    "RunNotResumable",
    "StoredRun",
    "RunStore",
    "Session",
    "SessionConflict",
    "StepRecord",
    "StoredRun",
    "TickReport",
    "error_from_stored",
    "hold_lease",
    "open_store",
    "recover",
    "resume",
    "start",
    "stored_error",
]
