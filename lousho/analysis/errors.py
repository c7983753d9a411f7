"""Errors of the analysis part. Codes are data: callers match on ``code``, never on the message."""

from __future__ import annotations

from lousho.kernel.errors import LoushoError, UsageError


class BadInputError(UsageError):
    """An argument outside its domain (a probability outside (0, 1), unsorted looks, ...).

    A usage error, so the CLI exits 2: the same call can never succeed.
    """

    code = "LOUSHO_STATS_BAD_INPUT"

    def __init__(self, name: str, value: object, expected: str, *, hint: str | None = None) -> None:
        self.name = name
        self.value = value
        self.expected = expected
        super().__init__(
            f"{name}={value!r}: expected {expected}",
            hint=hint or f"pass {name} as {expected}",
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuild from the structured fields so they survive pickling (executors, subprocesses).
        return (_rebuild_bad_input, (self.name, self.value, self.expected, self.hint))


class BoundaryError(LoushoError):
    """No boundary meets the requested error rate (a root finder found no crossing)."""

    code = "LOUSHO_STATS_NO_BOUNDARY"
    hint = "try a larger alpha, fewer looks, or looks that are further apart"

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        super().__init__(f"no {rule} boundary: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (BoundaryError, (self.rule, self.detail))


def _rebuild_bad_input(name: str, value: object, expected: str, hint: str) -> BadInputError:
    return BadInputError(name, value, expected, hint=hint)
