"""A key's budget settled by group commit (gateway/key_settlements.py): the settlements queued
while one is written go together, each key's added up into one statement, and every caller
returns once its own is committed; a caller that goes away still has its settlement written.
On committed rows, as the settling thread's own connection reads them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pytest

from contextplatform.gateway import key_settlements
from contextplatform.gateway.key_budgets import KeyReservation, ask_of, reserve_key
from contextplatform.gateway.key_settlements import SETTLER
from tenants.models import ApiKey, KeySpend
from tenants.services import issue_api_key
from tests.conftest import TenantFixture, _tenant
from tests.gateway.test_deployment_limits_cache import upstream

CALLS = 20
HELD_INPUT, WANTED_OUTPUT, USED = 100, 50, 120


@pytest.fixture
def committed_acme(django_db_setup: Any, django_db_blocker: Any) -> Iterator[TenantFixture]:
    with django_db_blocker.unblock():
        yield _tenant("acme")


@pytest.fixture
def budgeted_key(committed_acme: TenantFixture) -> Iterator[ApiKey]:
    api_key = issue_api_key(tenant=committed_acme.tenant, name=f"settle-{uuid.uuid4().hex[:8]}")
    key = api_key.api_key
    key.budget_max_tokens, key.budget_period = 1_000_000, "day"
    key.save(update_fields=["budget_max_tokens", "budget_period"])
    try:
        yield key
    finally:
        key.delete()


def reservations(key: ApiKey, count: int) -> list[KeyReservation]:
    ask = ask_of(key, [(HELD_INPUT, upstream())], WANTED_OUTPUT)
    return [reserve_key(ask) for _ in range(count)]


def spend_of(key: ApiKey) -> tuple[int, int]:
    row = KeySpend.objects.filter(key=key).values_list("spent_tokens", "reserved_tokens").get()
    return int(row[0]), int(row[1])


def test_settlements_queued_meanwhile_are_written_together(
    committed_acme: TenantFixture, budgeted_key: ApiKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = reservations(budgeted_key, CALLS)
    assert spend_of(budgeted_key) == (0, CALLS * (HELD_INPUT + WANTED_OUTPUT))
    batches: list[int] = []
    original = key_settlements.settle_keys

    def recording(settlements: Sequence[Any]) -> None:
        if not batches:  # the first is written once every other call has queued behind it
            deadline = time.monotonic() + 10
            rest = CALLS - len(settlements)
            while SETTLER._queue.qsize() < rest and time.monotonic() < deadline:
                time.sleep(0.01)
        batches.append(len(settlements))
        original(settlements)

    monkeypatch.setattr(key_settlements, "settle_keys", recording)

    async def settle_all() -> None:
        await asyncio.gather(
            *(SETTLER.settle(committed_acme.tenant, r, USED, Decimal(0)) for r in held)
        )

    asyncio.run(settle_all())
    # Those queued while a statement ran went in the next one: two at most for them all.
    assert sum(batches) == CALLS and len(batches) <= 2
    assert spend_of(budgeted_key) == (CALLS * USED, 0)  # every hold replaced by what was used


def test_a_caller_that_goes_away_still_has_its_settlement_written(
    committed_acme: TenantFixture, budgeted_key: ApiKey
) -> None:
    (held,) = reservations(budgeted_key, 1)

    async def cancelled() -> None:
        call = asyncio.ensure_future(SETTLER.settle(committed_acme.tenant, held, USED, Decimal(0)))
        await asyncio.sleep(0)  # queued
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancelled())
    deadline = time.monotonic() + 10
    while spend_of(budgeted_key) != (USED, 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert spend_of(budgeted_key) == (USED, 0)
