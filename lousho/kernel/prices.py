"""The cost of a model call, from ``genai-prices`` (Pydantic's maintained price table): a leaf that observe prices
spans with at ingest and the gate prices runs with (improve/pricing.py), so both use one table and one rule.

No GenAI convention carries cost, so a span whose instrumentation reports none is priced here from its
provider, model and token columns, with cache and reasoning tokens priced as the table says. The table is
the one bundled with the installed package: nothing here starts its auto-update, so ingest never reaches
the network. A model the table does not know gives no cost (NULL), never 0; the miss is remembered, so an
unpriced model costs one dictionary lookup per span.

The table's own calculation takes about 60 us a call (it validates the price units each time), as much as
the rest of a span's ingest. Between two tier starts (counts of input tokens) a model's price is an affine
function of the five token counts, so its coefficients are asked of the table once per interval (exact
decimals), checked against the table on two more usages in it, and a span then costs five decimal
multiplications. A failed check, an input at a tier start, or a usage outside the checked shape (cache above
input, reasoning above output) go to the table's own calculation. docs/performance.md has the cost per span.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import genai_prices

# GenAI ``gen_ai.provider.name`` values whose id in the price table differs.
_PROVIDER_IDS = {
    "aws.bedrock": "aws",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "x_ai": "x-ai",
    "mistral_ai": "mistral",
}

# (provider, model) -> the table's provider id to price it with, or False when the table has no price.
_known: dict[tuple[str | None, str], str | bool] = {}
# Model names come from the senders: the memories are bounded, and start over when full.
_MAX_REMEMBERED = 10_000
# (provider, models) none of which the table prices: one set lookup per span of an unpriced model.
_unpriced: set[tuple[str | None, tuple[str | None, ...]]] = set()


class Tokens(NamedTuple):
    """Token counts of one call; ``input`` includes the cache tokens (GenAI conventions)."""

    input: int
    output: int
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0


def known_unpriced(provider: str | None, models: tuple[str | None, ...]) -> bool:
    """Whether the table is already known to price none of ``models`` (checked before building the usage)."""
    return (provider, models) in _unpriced


def price(provider: str | None, models: tuple[str | None, ...], tokens: Tokens, start_ns: int) -> float | None:
    """The table's price in USD of a call, for the first of ``models`` it knows; None when it knows none."""
    if (provider, models) in _unpriced:
        return None
    for model in models:
        if not model:
            continue
        provider_id = _resolve(provider, model)
        if provider_id is False:
            continue
        when = datetime.fromtimestamp(start_ns / 1e9, tz=UTC)
        snapshot = _table()
        try:
            _, info = snapshot.find_provider_model(model, None, provider_id, None)
            model_price = info.get_prices(when)
            total = _affine_price(model_price, tokens)
            if total is None:
                total = _table_price(model_price, tokens)
        except (LookupError, ValueError):
            # A usage the model's prices cannot express (e.g. a unit it has no price for): unpriced.
            return None
        return float(total)
    if len(_unpriced) >= _MAX_REMEMBERED:
        _unpriced.clear()
    _unpriced.add((provider, models))
    return None


def _table() -> Any:
    """The bundled price table."""
    return _snapshot_getter()()


@cache
def _snapshot_getter() -> Callable[[], Any]:
    """The package loads here, at the first span to price, not with this module: it brings Pydantic and an HTTP
    client, a sixth of a second on every daemon start and CLI call that never prices a span. Cached, so a
    priced span does not pay an import statement."""
    import genai_prices.data_snapshot

    return genai_prices.data_snapshot.get_snapshot


def _usage(tokens: Tokens) -> genai_prices.Usage:
    import genai_prices

    return genai_prices.Usage(input_tokens=tokens.input, output_tokens=tokens.output,
                              cache_read_tokens=tokens.cache_read, cache_write_tokens=tokens.cache_creation,
                              output_reasoning_tokens=tokens.reasoning)


def _table_price(model_price: Any, tokens: Tokens) -> Decimal:
    return model_price.calc_price(_usage(tokens))["total_price"]


# id(ModelPrice) -> (the ModelPrice, kept so the id is not reused; the input-token bounds of its tiers and an
# affine form per interval between them, None where the table's answer did not match one).
_affine: dict[int, tuple[Any, tuple[int, ...], tuple[tuple[Decimal, ...] | None, ...]]] = {}
_STEP = 1000


def _affine_price(model_price: Any, tokens: Tokens) -> Decimal | None:
    """The table's price from the model's cached affine form for the usage's tier; None when there is none or
    the usage is outside the shape it was checked on."""
    if tokens.cache_read + tokens.cache_creation > tokens.input or tokens.reasoning > tokens.output:
        return None
    entry = _affine.get(id(model_price))
    if entry is None or entry[0] is not model_price:
        entry = (model_price, *_affine_forms(model_price))
        _affine[id(model_price)] = entry
    _, bounds, forms = entry
    interval = 0
    for bound in bounds:
        # A tier applies from its start; whether "from" is > or >= is the table's to say: ask it there.
        if abs(tokens.input - bound) <= 1:
            return None
        if tokens.input > bound:
            interval += 1
    form = forms[interval]
    return None if form is None else _evaluate(form, tokens)


def _affine_forms(model_price: Any) -> tuple[tuple[int, ...], tuple[tuple[Decimal, ...] | None, ...]]:
    """Tier starts (they are counts of input tokens) and, between them, the price's affine form."""
    from genai_prices.types import TieredPrices

    starts = sorted({tier.start for value in vars(model_price).values() if isinstance(value, TieredPrices)
                     for tier in value.tiers})
    lows = [0, *starts]
    highs = [*starts, None]
    return tuple(starts), tuple(_affine_form(model_price, low, high) for low, high in zip(lows, highs, strict=True))


def _affine_form(model_price: Any, low: int, high: int | None) -> tuple[Decimal, ...] | None:
    width = 4_000_000 if high is None else high - low
    if width < 100:
        return None
    base = Tokens(low + width // 10, 10_000, 0, 0, 0)
    step = min(_STEP, width // 10)
    checks = (Tokens(low + width // 20, 300, width // 80, width // 160, 50),
              Tokens(low + width // 2, 777_777, width // 8, width // 16, 55_555))
    try:
        at_base = _table_price(model_price, base)
        slopes = []
        for index in range(len(base)):
            bumped = list(base)
            bumped[index] += step
            slopes.append((_table_price(model_price, Tokens(*bumped)) - at_base) / step)
        form = (at_base, *slopes, *base)
        if any(_evaluate(form, check) != _table_price(model_price, check) for check in checks):
            return None
    except (LookupError, ValueError):
        return None
    return form


def _evaluate(form: tuple[Decimal, ...], tokens: Tokens) -> Decimal:
    """``form`` is the price at a base usage, the five slopes, then the base usage's five counts."""
    total = form[0]
    for slope, count, base in zip(form[1:6], tokens, form[6:], strict=True):
        if slope:
            total += slope * (count - base)
    return total


def _resolve(provider: str | None, model: str) -> str | bool:
    key = (provider, model)
    if key in _known:
        return _known[key]
    if len(_known) >= _MAX_REMEMBERED:
        _known.clear()
    candidates = []
    if provider:
        candidates.append(_PROVIDER_IDS.get(provider.lower(), provider.lower()))
    # A provider the table does not list (a proxy, a local server): let the table match the model name.
    candidates.append(None)
    resolved: str | bool = False
    snapshot = _table()
    for candidate in candidates:
        try:
            found_provider, _ = snapshot.find_provider_model(model, None, candidate, None)
        except LookupError:
            continue
        resolved = found_provider.id
        break
    _known[key] = resolved
    return resolved
