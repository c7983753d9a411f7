"""The failure-name study's shuffled condition: no record keeps its own name, and it always ends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lousho.improve.records import RunRecord
from lousho.improve.step import _shuffle_names


@settings(derandomize=True, max_examples=300)
@given(st.lists(st.sampled_from(["a", "b", "c", "sum-correct"]), min_size=1, max_size=12))
def test_shuffled_names_move_every_name_off_its_record(names: list[str]) -> None:
    records = [(f"run {i}", RunRecord("case", "rev", i, "fail", failed_check=n)) for i, n in enumerate(names)]
    moved = [r.failed_check for _, r in _shuffle_names(records)]
    assert all(m != n for m, n in zip(moved, names, strict=True))
    # Only a name held by more than half of the records leaves some of them unnamed.
    top = max(names.count(n) for n in names)
    if top * 2 <= len(names):
        assert "unnamed-check" not in moved
