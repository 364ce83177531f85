"""What a deployment's tokens cost: its price (USD per million tokens), the public list prices of
well-known models as defaults, and a call's cost from the usage its provider reported.

Pure: no database, no I/O. A deployment's own ``price`` wins; without one, the default of its
``model`` applies when the model is a known public one (a known name, or one followed by a date or
version: ``gpt-4o-mini-2024-07-18`` prices as ``gpt-4o-mini``, ``gpt-4o-audio-preview`` not at all);
otherwise the deployment is unpriced and a cost is ``None``, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contextplatform.protocols.usage import ProviderUsage

MAX_PRICE_PER_MTOK = 10_000.0


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Cached input (a provider's prompt-cache read) has its own price;
    a cache write (Anthropic's ``cache_creation_input_tokens``) costs ``cache_write_per_mtok``,
    by default the input price (OpenAI does not charge for writes; Anthropic charges 1.25 times the input price)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "input_per_mtok": self.input_per_mtok,
            "output_per_mtok": self.output_per_mtok,
            "cached_input_per_mtok": self.cached_input_per_mtok,
            "cache_write_per_mtok": self.cache_write_per_mtok,
        }


class PriceSpec(BaseModel):
    """A price as written on a deployment (``"price": {...}``)."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    output_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    cached_input_per_mtok: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_MTOK)
    cache_write_per_mtok: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_MTOK)

    def price(self) -> Price:
        return Price(
            self.input_per_mtok,
            self.output_per_mtok,
            self.cached_input_per_mtok,
            self.cache_write_per_mtok,
        )


def _anthropic(input_per_mtok: float, output_per_mtok: float) -> Price:
    # Anthropic's published ratios: a cache read costs a tenth of the input price, a write a quarter more.
    return Price(
        input_per_mtok,
        output_per_mtok,
        round(input_per_mtok * 0.1, 6),
        round(input_per_mtok * 1.25, 6),
    )


# The providers' public list prices (standard tier), for the models operators name most. An
# operator's own price on the deployment replaces these (negotiated rates, other tiers).
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o3": Price(2.00, 8.00, 0.50),
    "gpt-3.5-turbo": Price(0.50, 1.50),
    "claude-3-haiku": _anthropic(0.25, 1.25),
    "claude-3-5-haiku": _anthropic(0.80, 4.00),
    "claude-haiku-4-5": _anthropic(1.00, 5.00),
    "claude-3-5-sonnet": _anthropic(3.00, 15.00),
    "claude-3-7-sonnet": _anthropic(3.00, 15.00),
    "claude-sonnet-4": _anthropic(3.00, 15.00),
    "claude-opus-4-1": _anthropic(15.00, 75.00),
    "claude-opus-4-5": _anthropic(5.00, 25.00),
    "claude-opus-4": _anthropic(15.00, 75.00),
}
_BY_LENGTH = sorted(DEFAULT_PRICES, key=len, reverse=True)


def default_price(model: str) -> Price | None:
    """The public price of ``model`` (a known name, or a dated/suffixed snapshot of one)."""
    name = model.strip().lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" prices as "gpt-4o"
    for known in _BY_LENGTH:
        if name == known:
            return DEFAULT_PRICES[known]
        rest = name[len(known) + 1 :] if name.startswith(known) else ""
        # A snapshot: a date or version after a separator ("-2024-08-06", "@20250514",
        # "-latest"); "gpt-4o-audio-preview" is another model, not a gpt-4o snapshot.
        if name[len(known) : len(known) + 1] in ("-", "@") and (
            rest[:1].isdigit() or rest == "latest"
        ):
            return DEFAULT_PRICES[known]
    return None


def price_of(written: Any, model: str) -> Price | None:
    """A deployment's price: its own (the stored ``price`` object) or its model's default."""
    if isinstance(written, dict):
        try:
            return PriceSpec.model_validate(written).price()
        except ValueError:
            return None
    return default_price(model)


def cost_usd(
    price: Price | None,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """A call's cost. ``input_tokens`` is every prompt token the provider counted, cached reads
    and cache writes included (as the platform records usage); those two are priced at their own
    rates and the rest at the input price. None when the deployment has no price."""
    if price is None:
        return None
    cached = max(min(cached_input_tokens, input_tokens), 0)
    written = max(min(cache_write_tokens, input_tokens - cached), 0)
    uncached = input_tokens - cached - written
    cached_rate = (
        price.cached_input_per_mtok
        if price.cached_input_per_mtok is not None
        else price.input_per_mtok
    )
    write_rate = (
        price.cache_write_per_mtok
        if price.cache_write_per_mtok is not None
        else price.input_per_mtok
    )
    micro = (
        uncached * price.input_per_mtok
        + cached * cached_rate
        + written * write_rate
        + max(output_tokens, 0) * price.output_per_mtok
    )
    return round(micro / 1_000_000, 9)


def usage_cost(price: Price | None, usage: ProviderUsage) -> float | None:
    """What a provider's reported usage cost at ``price`` (None when unpriced)."""
    return cost_usd(
        price,
        input_tokens=usage.input,
        output_tokens=usage.output,
        cached_input_tokens=usage.cached_input,
        cache_write_tokens=usage.cache_write,
    )
