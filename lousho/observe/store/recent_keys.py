"""The keys of the newest stored spans, held in memory so the writer can drop a re-sent span without an index.

The spans table has no primary key (an index on random 128-bit keys made every commit 2x dearer and grew
with the table; docs/performance.md "Ingest"). De-duplication is two layers:

- this filter: the exact (key_hi, key_lo) of the newest ``capacity`` spans, in generations of sorted NumPy
  arrays ordered by a 64-bit mix of the key. A lookup is a ``searchsorted`` per generation, no Python loop
  per span. A hit is confirmed on the full key, so a new span is never taken for a duplicate; two different
  keys with the same mix can only make a duplicate look new (``unsure`` is set), never the reverse;
- ``store_compaction``: removes any duplicate that got past the filter (its twin older than the window, or
  a mix collision), run by the writer when idle and at start.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

# 2 Mi keys: 48 MiB (three uint64 arrays), several minutes of the goal's rate; a client re-sends within seconds.
DEFAULT_CAPACITY = 2 * 1024 * 1024
# Each generation costs every lookup a binary search: 8 of them at capacity, not 32 (a commit of 37,000 keys
# against a full filter 32 -> 16 ms), for a merge into the open generation that copies up to 6 MiB (4 -> 6 ms).
DEFAULT_GENERATION = 256 * 1024
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads sequential span ids over the 64 bits

U64 = NDArray[np.uint64]


def mix(hi: U64, lo: U64) -> U64:
    """The 64-bit sort key of each (hi, lo): distinct for keys that differ in hi only or in lo only."""
    return hi ^ (lo * _MIX)  # uint64 arithmetic wraps, as a hash should


class _Generation:
    """Keys sorted by their mix, with the full key alongside to confirm a hit."""

    __slots__ = ("h", "hi", "lo")

    def __init__(self, h: U64, hi: U64, lo: U64) -> None:
        self.h, self.hi, self.lo = h, hi, lo

    @classmethod
    def of(cls, hi: U64, lo: U64) -> _Generation:
        h = mix(hi, lo)
        order = np.argsort(h, kind="stable")
        return cls(h[order], hi[order], lo[order])

    def __len__(self) -> int:
        return len(self.h)

    def find(self, h: U64, hi: U64, lo: U64) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """Which keys are held, and which share a held mix without being that key (a collision)."""
        if not len(self.h):
            none = np.zeros(len(h), dtype=bool)
            return none, none
        at = np.minimum(np.searchsorted(self.h, h), len(self.h) - 1)
        same_mix = self.h[at] == h
        held = same_mix & (self.hi[at] == hi) & (self.lo[at] == lo)
        return held, same_mix & ~held

    def merged(self, other: _Generation) -> _Generation:
        """Both sorted: a linear merge (a copy of each array), not a re-sort, as this runs on every commit."""
        at = np.searchsorted(self.h, other.h)
        return _Generation(np.insert(self.h, at, other.h), np.insert(self.hi, at, other.hi),
                           np.insert(self.lo, at, other.lo))


class RecentKeys:
    """The newest ``capacity`` span keys (at most one generation more). Used by the writer thread only.

    ``complete`` stays True while every key ever stored is held (nothing evicted, nothing left out at load):
    then the filter alone decides and no compaction is needed. ``unsure`` is set when a lookup met a mix
    collision, so a duplicate may have been let through.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, generation: int = DEFAULT_GENERATION) -> None:
        self.capacity = capacity
        self._generation = max(1, min(generation, capacity))
        self._frozen: list[_Generation] = []  # full generations, oldest first
        self._open = _Generation.of(np.empty(0, np.uint64), np.empty(0, np.uint64))
        self.complete = True
        self.unsure = False

    def __len__(self) -> int:
        return len(self._open) + sum(len(g) for g in self._frozen)

    def fresh(self, hi: U64, lo: U64) -> NDArray[np.bool_]:
        """For each key, whether it is neither held nor an earlier key of the same batch (first one wins)."""
        return ~self.held(hi, lo) & first_occurrences(hi, lo)

    def held(self, hi: U64, lo: U64) -> NDArray[np.bool_]:
        """For each key, whether it is held (a span of it was stored)."""
        h = mix(hi, lo)
        # Looked up in sorted order: each binary search starts from the last one's place, so a batch's lookups
        # walk a generation once instead of missing the cache at every step (115 -> 32 ms for 37,000 keys
        # against 2 Mi held).
        order = np.argsort(h)
        h, hi, lo = h[order], hi[order], lo[order]
        found = np.zeros(len(h), dtype=bool)
        for generation in (*self._frozen, self._open):
            held, collided = generation.find(h, hi, lo)
            found |= held
            if collided.any():
                self.unsure = True  # a key sharing a held key's mix may hide its own copy: compact later
        answer = np.empty_like(found)
        answer[order] = found
        return answer

    def add(self, hi: U64, lo: U64) -> None:
        """Hold the keys of a committed batch (already fresh), evicting the oldest generation past capacity."""
        if not len(hi):
            return
        self._open = self._open.merged(_Generation.of(hi, lo))
        if len(self._open) >= self._generation:
            self._frozen.append(self._open)
            self._open = _Generation.of(np.empty(0, np.uint64), np.empty(0, np.uint64))
        while len(self) > self.capacity and self._frozen:
            self._frozen.pop(0)
            self.complete = False


def first_occurrences(hi: U64, lo: U64, seq: NDArray[np.integer] | None = None) -> NDArray[np.bool_]:
    """True at the first row of each distinct (hi, lo[, seq]), in the rows' order."""
    keys = (lo, hi) if seq is None else (seq, lo, hi)
    order = np.lexsort(keys)  # stable: equal keys stay in row order, so the first of a run is the earliest
    first = np.ones(len(hi), dtype=bool)
    if len(hi) > 1:
        same = np.ones(len(hi) - 1, dtype=bool)
        for column in keys:
            ordered = column[order]
            same &= ordered[1:] == ordered[:-1]
        first[order[1:][same]] = False
    return first
