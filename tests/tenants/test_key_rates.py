"""A key's own requests and tokens a minute, counted in the cache, and what a resolve's judge
spent charged to its budget; a key that sets none of these costs no query and no cache trip."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from contextplatform.gateway.budgets import HeldBudget
from contextplatform.gateway.key_limits import hold_key_limits, key_rate_refusal
from tenants import key_rates
from tenants.key_services import charge, judge_spend
from tenants.models import KeySpend, period_start
from tenants.services import issue_api_key
from tests.conftest import TenantFixture


@dataclass
class Outcome:
    notes: dict[str, Any] = field(default_factory=dict)


def test_requests_a_minute_count_up_to_the_keys_own_limit(acme: TenantFixture) -> None:
    api_key = issue_api_key(tenant=acme.tenant, name="rpm").api_key
    api_key.rate_limit_rpm = 3
    assert [key_rates.rpm_refusal(api_key) for _ in range(3)] == [None, None, None]
    refused = key_rates.rpm_refusal(api_key)
    assert refused is not None and refused.limit == 3 and 1 <= refused.retry_after_s <= 60
    assert "rate_limit.rpm" in refused.message
    api_key.rate_limit_rpm = None
    assert key_rates.rpm_refusal(api_key) is None


def test_tokens_a_minute_hold_then_count_what_was_used(acme: TenantFixture) -> None:
    api_key = issue_api_key(tenant=acme.tenant, name="tpm").api_key
    api_key.rate_limit_tpm = 1000
    first = key_rates.hold_tokens(api_key, 600)
    assert isinstance(first, key_rates.TokenHold)
    assert isinstance(key_rates.hold_tokens(api_key, 600), key_rates.TokensLimited)
    key_rates.settle_tokens(first, 100)  # it used less than it held: the rest is free again
    second = key_rates.hold_tokens(api_key, 600)
    assert isinstance(second, key_rates.TokenHold)
    key_rates.settle_tokens(second, None)  # failed: nothing used
    assert isinstance(key_rates.hold_tokens(api_key, 900), key_rates.TokenHold)
    limited = key_rates.hold_tokens(api_key, 1)
    assert isinstance(limited, key_rates.TokensLimited) and "tokens a minute" in limited.message


def test_the_judges_spend_is_charged_to_a_budgeted_key_only(acme: TenantFixture) -> None:
    outcomes = [
        Outcome(
            {"judge_usage": {"calls": 1, "input_tokens": 120, "output_tokens": 8, "cost_usd": 0.5}}
        ),
        Outcome(
            {"judge_usage": {"calls": 1, "input_tokens": 30, "output_tokens": 2, "cost_usd": None}}
        ),
        Outcome(),
    ]
    assert judge_spend(outcomes) == (160, Decimal("0.5"))
    free = issue_api_key(tenant=acme.tenant, name="free").api_key
    with CaptureQueriesContext(connection) as queries:
        charge(api_key=free, tokens=160, usd=Decimal("0.5"))
    assert len(queries) == 0
    budgeted = issue_api_key(tenant=acme.tenant, name="budgeted").api_key
    budgeted.budget_max_tokens, budgeted.budget_period = 10_000, "day"
    budgeted.save()
    for _ in range(2):
        charge(api_key=budgeted, tokens=160, usd=Decimal("0.5"))
    row = KeySpend.objects.get(key=budgeted, period_start=period_start("day"))
    assert (row.spent_tokens, row.spent_usd, row.reserved_tokens) == (320, Decimal("1.0"), 0)


def test_an_unlimited_key_adds_no_query_to_a_call(acme: TenantFixture) -> None:
    """The gateway's key limits ask nothing of a key without a rate limit or budget: not the
    database, not the cache (its settings came with its lookup)."""
    api_key = issue_api_key(tenant=acme.tenant, name="unlimited").api_key
    held = HeldBudget(acme.tenant, None)
    with CaptureQueriesContext(connection) as queries:
        asyncio.run(hold_key_limits(held, api_key, acme.tenant, None, []))  # type: ignore[arg-type]
        assert key_rate_refusal(api_key) is None
    assert len(queries) == 0
    assert held.key is None and not held.holds_anything
