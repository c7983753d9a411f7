"""The base of every error a user can meet. A leaf module: it imports nothing of ours.

Each error carries a stable ``code`` (``LOUSHO_<AREA>_<NAME>``), whether retrying can help, and a
one-line ``hint``. Codes are data: callers match on ``code``, never on the message text.
"""

from __future__ import annotations

from typing import Any


class LoushoError(Exception):
    code: str = "LOUSHO_INTERNAL"
    retryable: bool = False
    hint: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        hint: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if hint is not None:
            self.hint = hint
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        # Survive pickling (subprocesses, executors) with the fields intact.
        return (_rebuild, (type(self), self.message, self.code, self.hint, self.retryable))

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code, "retryable": self.retryable}

    def __str__(self) -> str:
        return self.message


def retry_after_of(stored: Any) -> float | None:
    """The ``retry_after`` seconds of a stored error dict (a run's ``last_error``); None when absent or not
    a number >= 0. The provider's Retry-After travels this way from the models part to the recover loop."""
    value = stored.get("retry_after") if isinstance(stored, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return float(value)


def _rebuild(cls: type[LoushoError], message: str, code: str, hint: str, retryable: bool):
    err = cls.__new__(cls)
    LoushoError.__init__(err, message, code=code, hint=hint, retryable=retryable)
    return err


class UsageError(LoushoError):
    """Bad arguments or configuration: the CLI exits 2."""

    code = "LOUSHO_USAGE"
