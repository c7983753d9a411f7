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
from lousho.recover.loop import RecoverApp, RecoverSettings, Recovery, RecoveryLoop, TickReport, recover
from lousho.recover.store import DEFAULT_URL, Approval, OutageState, RunRecord, RunStore, Session, StepRecord
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
    "RecoverSettings",
    "Recovery",
    "RecoveryLoop",
    "RunAwaitingApproval",
    "RunDiverged",
    "RunExists",
    "RunNotFound",
    "RunNotResumable",
    "RunRecord",
    "RunStore",
    "Session",
    "SessionConflict",
    "StepRecord",
    "TickReport",
    "error_from_stored",
    "hold_lease",
    "open_store",
    "recover",
    "resume",
    "start",
    "stored_error",
]
