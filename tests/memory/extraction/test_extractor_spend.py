"""The LLM extractor's call is charged to the key whose resolve started the turn: once the answer
is handed back and the write runs (eagerly in tests), the key's budget period holds the tokens
the extractor deployment's answer reported and their cost at the deployment's price. A key
without a budget has nothing written. Against the loopback upstream (``tests/upstream.py``),
through the real key, resolve and hand-back endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from django_tenants.utils import schema_context

from memory.models import MemoryTurn
from tenants.models import KeySpend
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.memory.extraction.test_llm_deployments import USER_TEXT, memory_route, turn_through
from tests.upstream import Behaviour, LoopbackUpstream, prompt_tokens, running_upstream

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
COMPLETION_TOKENS = 37
DECISIONS = [{"action": "add", "content": "User loves jazz", "kind": "preference"}]


@pytest.fixture
def upstream() -> Iterator[LoopbackUpstream]:
    with running_upstream() as running:
        running.behaviour = Behaviour(
            text=lambda body: json.dumps({"decisions": DECISIONS}),
            completion_tokens=COMPLETION_TOKENS,
        )
        yield running


def priced_extractor(
    api: ApiClient, upstream: LoopbackUpstream, price: dict[str, float] = PRICE
) -> None:
    body = {
        "name": "priced-extractor",
        "protocol": "openai",
        "base_url": upstream.openai_base_url,
        "model": "priced-extractor-model",
        "api_key": "sk-extract-" + "5" * 20,
        "timeout_ms": 5000,
        "may_judge": False,
        "price": price,
    }
    response = api.post("/api/v1/deployments", body)
    assert response.status_code == 201, response.content
    memory_route(api, "priced-extractor")


def new_key(api: ApiClient, **fields: Any) -> tuple[int, ApiClient]:
    response = api.post("/api/v1/keys", {"name": "app", "scopes": ["resolve"], **fields})
    assert response.status_code == 201, response.content
    issued = response.json()
    return int(issued["id"].removeprefix("key_")), ApiClient(issued["key"])


def spend_of(key_id: int) -> list[tuple[int, Decimal]]:
    return list(KeySpend.objects.filter(key_id=key_id).values_list("spent_tokens", "spent_usd"))


def test_the_extractors_call_is_charged_to_the_keys_budget(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    key_id, keyed = new_key(acme_api, budget={"max_tokens": 10**6, "period": "total"})
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        priced_extractor(acme_api, upstream)
        resolve_id = turn_through(keyed)

    with schema_context(acme.schema):
        turn = MemoryTurn.objects.get(resolve_id=resolve_id)
    assert (turn.status, turn.key_id) == ("written", key_id)
    [seen] = upstream.requests  # the extractor's one call
    assert USER_TEXT in json.dumps(seen.body)
    prompt = prompt_tokens(seen.body)
    cost = Decimal(str(round((prompt * 3.0 + COMPLETION_TOKENS * 15.0) / 1_000_000, 9)))
    assert spend_of(key_id) == [(prompt + COMPLETION_TOKENS, cost)]
    assert cost > 0


def test_cached_input_is_charged_at_its_own_price(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    """The extractor's answer reports part of its prompt read from the provider's cache: those
    tokens count, at the deployment's cached input price, as a gateway call's would."""
    cached = 100
    upstream.behaviour = replace(upstream.behaviour, cached_input=cached)
    key_id, keyed = new_key(acme_api, budget={"max_tokens": 10**6, "period": "total"})
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        priced_extractor(acme_api, upstream, {**PRICE, "cached_input_per_mtok": 0.3})
        turn_through(keyed)

    [seen] = upstream.requests
    prompt = prompt_tokens(seen.body)
    assert prompt > cached
    usd = ((prompt - cached) * 3.0 + cached * 0.3 + COMPLETION_TOKENS * 15.0) / 1_000_000
    assert spend_of(key_id) == [(prompt + COMPLETION_TOKENS, Decimal(str(round(usd, 9))))]


def test_a_key_without_a_budget_has_no_spend_written(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    key_id, keyed = new_key(acme_api)
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        priced_extractor(acme_api, upstream)
        resolve_id = turn_through(keyed)

    with schema_context(acme.schema):
        turn = MemoryTurn.objects.get(resolve_id=resolve_id)
    assert (turn.status, turn.key_id) == ("written", key_id)
    assert len(upstream.requests) == 1  # the call was made, and costs this key nothing
    assert spend_of(key_id) == []
