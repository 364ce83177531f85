"""Prices and costs, without a database."""

from __future__ import annotations

import pytest

from contextplatform.deployments.pricing import (
    Price,
    PriceSpec,
    cost_usd,
    default_price,
    price_of,
)


def test_known_models_and_their_snapshots_have_the_public_price() -> None:
    assert default_price("gpt-4o-mini") == Price(0.15, 0.60, 0.075)
    # The longest known name wins: a dated gpt-4o-mini is not priced as gpt-4o.
    assert default_price("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60, 0.075)
    assert default_price("gpt-4o-2024-08-06") == Price(2.50, 10.00, 1.25)
    assert default_price("openai/gpt-4.1-mini") == Price(0.40, 1.60, 0.10)
    sonnet = default_price("claude-sonnet-4-20250514")
    assert sonnet is not None and sonnet.cached_input_per_mtok == pytest.approx(0.3)


def test_an_unknown_model_is_unpriced_not_guessed() -> None:
    assert default_price("my-finetune") is None
    assert default_price("gpt-4o-minix") is None
    assert cost_usd(None, input_tokens=1000, output_tokens=10) is None


def test_the_deployments_own_price_wins_over_the_default() -> None:
    own = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    assert price_of(own, "gpt-4o") == Price(1.0, 2.0)
    assert price_of(None, "gpt-4o") == Price(2.50, 10.00, 1.25)
    assert price_of(None, "local-llama") is None


def test_cost_prices_cached_reads_and_cache_writes_at_their_own_rates() -> None:
    price = Price(3.0, 15.0, 0.3, 3.75)
    # 1,000 plain input + 8,000 cache reads + 1,000 cache writes + 500 output tokens.
    cost = cost_usd(
        price,
        input_tokens=10_000,
        output_tokens=500,
        cached_input_tokens=8_000,
        cache_write_tokens=1_000,
    )
    assert cost == pytest.approx((1_000 * 3.0 + 8_000 * 0.3 + 1_000 * 3.75 + 500 * 15.0) / 1e6)


def test_without_a_cached_price_cached_tokens_cost_the_input_price() -> None:
    assert cost_usd(
        Price(1.0, 1.0), input_tokens=100, output_tokens=0, cached_input_tokens=100
    ) == (pytest.approx(100 / 1e6))


def test_a_price_is_validated_as_written() -> None:
    with pytest.raises(ValueError):
        PriceSpec.model_validate({"input_per_mtok": -1, "output_per_mtok": 1})
    with pytest.raises(ValueError):
        PriceSpec.model_validate({"input_per_mtok": 1, "output_per_mtok": 1, "per_call": 2})
