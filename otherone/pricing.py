"""What a model call costs: its profile's declared `ModelPrices`, else the maintained price table
of `genai-prices` (bundled with the package, read offline) for models it knows.

Costs are exact `Decimal` US dollars (prices are per million tokens: a token's price has more
decimals than a float keeps exactly). Computed on the worker, in the model-call activity, never
in workflow code: the table is data that changes with the package's version.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache

from otherone.definitions import ModelPrices, ModelProfile

logger = logging.getLogger(__name__)

PER_MILLION = Decimal(1_000_000)

#: Our providers under the names `genai-prices` knows them by (the others are not in its table:
#: a local server's or the scripted model's calls are priced only when declared).
_TABLE_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "openrouter": "openrouter"}


@dataclass(frozen=True)
class CallTokens:
    """The tokens of one model call as billed: ``input`` counts every prompt token, the
    cached ones (``cache_read``, ``cache_write``) included."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def fresh_input(self) -> int:
        """Prompt tokens neither read from nor written to the cache (full price)."""
        return max(0, self.input - self.cache_read - self.cache_write)


def declared_cost(prices: ModelPrices, tokens: CallTokens) -> Decimal:
    """The call's cost at declared per-million prices (a cache price left out is ``input``)."""
    cache_read = prices.input if prices.cache_read is None else prices.cache_read
    cache_write = prices.input if prices.cache_write is None else prices.cache_write
    micro = (
        tokens.fresh_input * prices.input
        + tokens.output * prices.output
        + tokens.cache_read * cache_read
        + tokens.cache_write * cache_write
    )
    return micro / PER_MILLION


def call_cost(profile: ModelProfile, tokens: CallTokens) -> Decimal | None:
    """The call's cost under ``profile``: declared prices win; else the table's, for a model
    it knows; else None (not priced)."""
    if profile.prices is not None:
        return declared_cost(profile.prices, tokens)
    return table_cost(profile.provider, profile.model, tokens)


def table_cost(provider: str, model: str, tokens: CallTokens) -> Decimal | None:
    """The call's cost from `genai-prices`' bundled table (tiered prices included), or None
    for a provider or model it does not know."""
    provider_id = _TABLE_PROVIDERS.get(provider)
    if provider_id is None or not _known(provider_id, model):
        return None
    from genai_prices import Usage, calc_price

    usage = Usage(
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_read_tokens=tokens.cache_read,
        cache_write_tokens=tokens.cache_write,
    )
    try:
        return calc_price(usage, model_ref=model, provider_id=provider_id).total_price
    except (LookupError, ValueError) as error:  # counts the table cannot price
        logger.warning("no price for %s model %r: %s", provider, model, error)
        return None


def preload(profiles: Iterable[ModelProfile]) -> None:
    """Load the table (about half a second) and look up the profiles priced by it, at worker
    start: not on the event loop of a worker's first model call."""
    for profile in profiles:
        provider_id = _TABLE_PROVIDERS.get(profile.provider)
        if profile.prices is None and provider_id is not None:
            _known(provider_id, profile.model)


@cache
def _known(provider_id: str, model: str) -> bool:
    """Whether the table has the model (looked up once per model and process)."""
    from genai_prices import Usage, calc_price

    try:
        calc_price(Usage(input_tokens=0), model_ref=model, provider_id=provider_id)
    except LookupError:
        logger.info("genai-prices has no %s model %r: its calls are not priced", provider_id, model)
        return False
    return True
