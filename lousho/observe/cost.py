"""The cost of a model call at ingest, from ``genai-prices`` (Pydantic's maintained price table).

No GenAI convention carries cost, so a span whose instrumentation reports none is priced here from its
provider, model and token columns, with cache and reasoning tokens priced as the table says. The table is
the one bundled with the installed package: nothing here starts its auto-update, so ingest never reaches
the network. A model the table does not know gives no cost (NULL), never 0; the miss is remembered, so an
unpriced model costs one dictionary lookup per span.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

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


class Tokens(NamedTuple):
    """Token counts of one call; ``input`` includes the cache tokens (GenAI conventions)."""

    input: int
    output: int
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0


def price(provider: str | None, models: tuple[str | None, ...], tokens: Tokens, start_ns: int) -> float | None:
    """The table's price in USD of a call, for the first of ``models`` it knows; None when it knows none."""
    for model in models:
        if not model:
            continue
        provider_id = _resolve(provider, model)
        if provider_id is False:
            continue
        usage = genai_prices.Usage(input_tokens=tokens.input, output_tokens=tokens.output,
                                   cache_read_tokens=tokens.cache_read, cache_write_tokens=tokens.cache_creation,
                                   output_reasoning_tokens=tokens.reasoning)
        when = datetime.fromtimestamp(start_ns / 1e9, tz=UTC)
        try:
            result = genai_prices.calc_price(usage, model, provider_id=provider_id, genai_request_timestamp=when)
        except (LookupError, ValueError):
            # A usage the model's prices cannot express (e.g. a unit it has no price for): unpriced.
            return None
        return float(result.total_price)
    return None


def _resolve(provider: str | None, model: str) -> str | bool:
    key = (provider, model)
    if key in _known:
        return _known[key]
    candidates = []
    if provider:
        candidates.append(_PROVIDER_IDS.get(provider.lower(), provider.lower()))
    # A provider the table does not list (a proxy, a local server): let the table match the model name.
    candidates.append(None)
    resolved: str | bool = False
    snapshot = genai_prices.data_snapshot.get_snapshot()
    for candidate in candidates:
        try:
            found_provider, _ = snapshot.find_provider_model(model, None, candidate, None)
        except LookupError:
            continue
        resolved = found_provider.id
        break
    _known[key] = resolved
    return resolved
