"""The provider-outage rule (seed 000 "Provider outages"). A leaf module: it imports nothing of ours.

One definition for the parts that apply it: the recover loop's breaker (``lousho.recover.outage``), which pauses
after ``THRESHOLD`` provider failures in a row across any runs, and the monitor's stratified watch
(``lousho.analysis.outages``), which leaves out the runs of every such streak it finds in stored runs. The
breaker counts live, in its store; ``in_outage`` finds the same streaks afterwards in a sequence of runs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

THRESHOLD = 3  # seed 000: "After 3 provider failures in a row, across any runs, the loop pauses"


def in_outage(marked: NDArray[np.bool_], threshold: int = THRESHOLD) -> NDArray[np.bool_]:
    """Which runs lie in a streak of at least ``threshold`` consecutive marked runs (the provider failed them),
    along the last axis: one stream in run order, or one stream per row."""
    marked = np.asarray(marked, dtype=bool)
    index = np.broadcast_to(np.arange(marked.shape[-1]), marked.shape)
    # Each run's streak runs from after the last unmarked run before it to before the next one after it.
    last_gap = np.maximum.accumulate(np.where(marked, -1, index), axis=-1)
    next_gap = np.flip(np.minimum.accumulate(np.flip(np.where(marked, marked.shape[-1], index), axis=-1), axis=-1),
                       axis=-1)
    return marked & (next_gap - last_gap - 1 >= threshold)
