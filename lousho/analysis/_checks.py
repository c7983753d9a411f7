"""Argument checks shared by the statistics modules; each raises ``BadInputError`` with the name."""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

from lousho.analysis.errors import BadInputError

# The DP grid is (n + 1)^2 per look and each look costs O(n^3): 1,000 runs per side stays in seconds.
MAX_RUNS_PER_SIDE = 1000
MAX_LOOKS = 50


def probability(name: str, value: float) -> float:
    """A pass rate strictly inside (0, 1): at 0 or 1 every rule is degenerate."""
    if not _real(value) or not 0.0 < float(value) < 1.0:
        raise BadInputError(name, value, "a number strictly between 0 and 1")
    return float(value)


def unit_interval(name: str, value: float) -> float:
    """A probability that may be 0 or 1 (a true pass rate in an exact sum)."""
    if not _real(value) or not 0.0 <= float(value) <= 1.0:
        raise BadInputError(name, value, "a number between 0 and 1")
    return float(value)


def alpha(value: float) -> float:
    return probability("alpha", value)


def positive_int(name: str, value: int) -> int:
    if not _integer(value) or value < 1:
        raise BadInputError(name, value, "a positive integer")
    return int(value)


def non_negative(name: str, value: float) -> float:
    if not _real(value) or math.isnan(value) or value < 0:
        raise BadInputError(name, value, "a number >= 0")
    return float(value)


def looks(value: Sequence[int]) -> tuple[int, ...]:
    """Planned look sizes (runs per side): positive, strictly increasing, within the DP's reach."""
    result = tuple(value)
    expected = "strictly increasing positive run counts, e.g. 20,40,60"
    if not result or len(result) > MAX_LOOKS:
        raise BadInputError("looks", list(result), f"1 to {MAX_LOOKS} {expected}")
    if any(not _integer(n) or n < 1 for n in result):
        raise BadInputError("looks", list(result), expected)
    if any(b <= a for a, b in zip(result, result[1:], strict=False)):
        raise BadInputError("looks", list(result), expected)
    if result[-1] > MAX_RUNS_PER_SIDE:
        raise BadInputError("looks", list(result), f"at most {MAX_RUNS_PER_SIDE} runs per side")
    return tuple(int(n) for n in result)


def counts(passes: int, runs: int) -> tuple[int, int]:
    """A pass count out of at least one run."""
    runs = positive_int("runs", runs)
    if not _integer(passes) or not 0 <= passes <= runs:
        raise BadInputError("passes", passes, f"an integer between 0 and runs ({runs})")
    return int(passes), int(runs)


def _real(value: object) -> bool:
    # numpy scalars register as numbers.Real; bool is an int but never a count or a rate.
    return isinstance(value, Real) and not isinstance(value, bool)


def _integer(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)
