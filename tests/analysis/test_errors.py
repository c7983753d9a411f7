"""Analysis errors: stable codes, hints, usage-error exit class, and pickling with their fields."""

from __future__ import annotations

import pickle

import pytest

from lousho.analysis import boundaries
from lousho.analysis.errors import BadInputError, BoundaryError
from lousho.kernel.errors import LoushoError, UsageError


def test_bad_input_is_a_usage_error_that_survives_pickling_with_its_fields() -> None:
    error = BadInputError("looks", [40, 20], "strictly increasing run counts")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, UsageError)
    assert (copy.code, copy.name, copy.value, copy.expected) == (
        "LOUSHO_STATS_BAD_INPUT", "looks", [40, 20], "strictly increasing run counts"
    )
    assert copy.message == error.message and copy.hint == error.hint


def test_a_root_finder_without_a_crossing_raises_no_boundary_not_a_usage_error() -> None:
    with pytest.raises(BoundaryError) as caught:
        boundaries._solve("pocock", lambda c: 1.0, 0.0, 1.0)
    error = caught.value
    assert isinstance(error, LoushoError) and not isinstance(error, UsageError)
    assert error.code == "LOUSHO_STATS_NO_BOUNDARY" and error.hint
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.rule, copy.message) == ("pocock", error.message)
