"""What a run cost in dollars, from the price table observe prices calls with (``lousho.kernel.prices``).

Tokens hide what a user pays: output tokens cost about 4 times input tokens on most models, and cache
reads less, so an edit that moves tokens from input to output, or a change of model, can cost more at
fewer tokens. A run is priced from its record's token split and model, by the same offline table and
function that price ingested spans (``genai-prices``, never its network update). A run has no price when
its model is unknown to the table, or when its record does not split its tokens (a record from before
the split was kept, a probe that reports only a total): its cost is then known only in tokens.

Both sides of one comparison are priced at one instant, so a price change between their runs is not
read as the edit's doing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from lousho.improve.records import RunRecord

Unit = Literal["usd", "tokens"]


def run_usd(record: RunRecord, at_ns: int) -> float | None:
    """The run's price in USD at ``at_ns`` (ns since the epoch); None when it has none (see above)."""
    split = record.input_tokens + record.output_tokens
    if not record.model or split != record.tokens or record.cache_read_tokens > record.input_tokens:
        return None
    # Imported here: the table takes a sixth of a second to load, which a step that never prices should not pay.
    from lousho.kernel import prices

    return prices.price(None, (record.model,), prices.Tokens(record.input_tokens, record.output_tokens,
                                                         record.cache_read_tokens), at_ns)


def runs_usd(records: Iterable[RunRecord], at_ns: int) -> float | None:
    """The runs' summed price; None when any of them has none."""
    total = 0.0
    for record in records:
        usd = run_usd(record, at_ns)
        if usd is None:
            return None
        total += usd
    return total


@dataclass(frozen=True)
class PerPass:
    """What one passing run cost: all the runs' tokens (and dollars) over the runs that passed.

    ``inf`` when none passed; ``usd`` is None when some run has no price.
    """

    tokens: float
    usd: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {"tokens": None if math.isinf(self.tokens) else self.tokens,
                "usd": None if self.usd is None or math.isinf(self.usd) else self.usd}


def per_pass(runs: Mapping[str, Sequence[RunRecord]], at_ns: int) -> PerPass:
    records = [r for rs in runs.values() for r in rs]
    passes = sum(r.passed for r in records)
    usd = runs_usd(records, at_ns)
    if not passes:
        return PerPass(math.inf, None if usd is None else math.inf)
    return PerPass(sum(r.tokens for r in records) / passes, None if usd is None else usd / passes)


def cost_unit(costs: Iterable[PerPass]) -> Unit:
    """Dollars when every one of ``costs`` has a price, else tokens: costs are compared in one unit."""
    return "usd" if all(c.usd is not None for c in costs) else "tokens"


def in_unit(cost: PerPass, unit: Unit) -> float:
    return cost.usd if unit == "usd" and cost.usd is not None else cost.tokens
