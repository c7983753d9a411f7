"""The writer's filter of recent span keys against a plain reference: it answers in the batch's own order (its
lookups run sorted), holds exactly the newest keys while complete, and never takes a new key for a held one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lousho.observe.store.recent_keys import RecentKeys, first_occurrences

# Small keys so batches repeat keys and meet earlier ones; hi and lo drawn apart so mixes rarely collide.
_key = st.tuples(st.integers(0, 40), st.integers(0, 40))
_batches = st.lists(st.lists(_key, max_size=30), min_size=1, max_size=12)


def _arrays(batch: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    hi = np.array([k[0] for k in batch], np.uint64)
    lo = np.array([k[1] for k in batch], np.uint64)
    return hi, lo


@settings(max_examples=200, deadline=None)
@given(batches=_batches, capacity=st.integers(1, 60), generation=st.integers(1, 16))
def test_the_filter_answers_as_a_set_of_the_newest_keys(batches: list[list[tuple[int, int]]], capacity: int,
                                                         generation: int) -> None:
    recent = RecentKeys(capacity, generation)
    stored: list[tuple[int, int]] = []  # every key the writer kept, oldest first
    for batch in batches:
        hi, lo = _arrays(batch)
        complete = recent.complete  # every key stored so far still held
        fresh = recent.fresh(hi, lo)
        seen: set[tuple[int, int]] = set()
        for key, is_fresh in zip(batch, fresh.tolist(), strict=True):
            if key in seen:
                assert not is_fresh, f"{key} repeated within a batch was kept twice"
            elif key in stored:
                # Past its capacity an evicted key may come back as new (compaction's job); while complete, never.
                assert not (complete and is_fresh), f"{key} was stored but the complete filter let it in again"
            else:
                assert is_fresh, f"{key} was never stored but the filter holds it"
            seen.add(key)
        recent.add(hi[fresh], lo[fresh])
        stored.extend(k for k, f in zip(batch, fresh.tolist(), strict=True) if f)
        if recent.complete:
            held = recent.held(*_arrays(stored)) if stored else np.zeros(0, bool)
            assert held.all(), "a stored key was lost while the filter says it holds every key"


def test_a_large_batch_is_answered_in_its_own_order() -> None:
    rng = np.random.default_rng(7)
    recent = RecentKeys(1 << 16, 1 << 12)
    hi = rng.integers(0, 2**63, 50_000, dtype=np.uint64)
    lo = rng.integers(0, 2**63, 50_000, dtype=np.uint64)
    recent.add(hi[::2], lo[::2])  # every other key stored, across several generations
    held = recent.held(hi, lo)
    assert held[::2].all() and not held[1::2].any()
    assert recent.fresh(hi[1::2], lo[1::2]).all()


def test_first_occurrences_keeps_the_earliest_copy() -> None:
    hi = np.array([5, 1, 5, 1, 2], np.uint64)
    lo = np.array([9, 3, 9, 4, 2], np.uint64)
    assert first_occurrences(hi, lo).tolist() == [True, True, False, True, True]
