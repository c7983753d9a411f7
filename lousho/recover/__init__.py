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
from lousho.recover.store import DEFAULT_URL, Approval, RunRecord, RunStore, Session, StepRecord
from lousho.recover.store import open as open_store

__all__ = [
    "DEFAULT_URL",
    "Approval",
    "ApprovalNotFound",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "DurableRun",
    "LeaseLost",
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
    "error_from_stored",
    "open_store",
    "resume",
    "start",
    "stored_error",
]
