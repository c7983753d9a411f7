"""The recover part's errors: codes, hints naming the run, pickling with fields, the stored error dict."""

from __future__ import annotations

import pickle

import pytest

from lousho.kernel.errors import LoushoError
from lousho.recover.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    LeaseLost,
    RunDiverged,
    StoreNotSqlite,
    error_from_stored,
    stored_error,
)

ERRORS = [
    CheckpointCorrupt("r1", 3, "output", "/tmp/runs.db"),
    CheckpointNotFound("r1", 9, [0, 1, 2]),
    RunDiverged("r1", 2, "search", "write"),
    StoreNotSqlite("postgresql://u:pw@h/db"),
    LeaseLost("r1", 0, 1),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_have_a_lousho_code_and_a_hint_and_pickle_with_their_fields(err: BaseException):
    assert err.code.startswith("LOUSHO_") and err.hint
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err) and str(copy) == str(err) and vars(copy) == vars(err)


def test_stored_error_keeps_a_lousho_errors_code_and_category_and_round_trips():
    err = LoushoError("rate limited", code="LOUSHO_PROVIDER_RATE_LIMIT", retryable=True)
    err.category = "rate-limit"  # provider errors carry one
    stored = stored_error(err)
    assert stored == {"message": "rate limited", "code": "LOUSHO_PROVIDER_RATE_LIMIT", "category": "rate-limit",
                      "retryable": True}
    rebuilt = error_from_stored(stored)
    assert isinstance(rebuilt, LoushoError) and rebuilt.to_dict() == stored
    assert stored_error(rebuilt) == stored


def test_stored_error_of_an_unclassified_exception_is_retryable_and_of_a_stop_signal_is_interrupted():
    assert stored_error(ValueError("bad")) == {"message": "ValueError: bad", "code": "LOUSHO_RUN_EXCEPTION",
                                               "category": None, "retryable": True}
    assert stored_error(KeyboardInterrupt())["code"] == "LOUSHO_RUN_INTERRUPTED"
    assert stored_error(LeaseLost("r1", 0, 1))["code"] == "LOUSHO_LEASE_LOST"
