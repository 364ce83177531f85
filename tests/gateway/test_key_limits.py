"""A key's own limits through the live gateway and the loopback upstream: its budget in tokens
and in dollars holds against concurrent calls (one atomic reservation each, settled to the
provider's usage), a USD budget refuses a deployment without a price, and its requests and tokens
a minute answer 429 ``rate_limited`` with ``Retry-After``; the resolve's judge calls count in its
budget; a key revoked through the API is
refused by the gateway at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from contextplatform.deployments.pricing import Price, cost_usd
from tests.gateway.conftest import (
    CONCURRENT,
    FITS,
    MAX_OUTPUT,
    Gateway,
    budget_messages,
    burst,
    reserved_per_call,
    split,
    unique,
)
from tests.gateway.test_judge_deployment import (  # the judged route's set-up, shared
    QUESTION,
    answering,
    memory_notes,
    setup_route,
    teardown_route,
)
from tests.upstream import LoopbackUpstream

SETTLE_WAIT_S = 5.0
PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 3000.0}  # dear, so that cents count


@pytest.fixture
def made(gateway: Gateway) -> Iterator[Any]:
    """Keys, deployments and routes made by a test, revoked or removed after it."""
    keys: list[str] = []
    paths: list[str] = []

    class Make:
        def key(self, **fields: Any) -> dict[str, Any]:
            body = {"name": unique("gw-key"), "scopes": ["resolve"], **fields}
            with gateway.api() as api:
                response = api.post("/api/v1/keys", json=body)
            assert response.status_code == 201, response.text
            keys.append(response.json()["id"])
            return dict(response.json())

        def route(
            self, *, price: dict[str, float] | None, session_budget: int | None = None
        ) -> str:
            name = unique("gw-keyed")
            deployment = {
                "name": name,
                "protocol": "openai",
                "base_url": gateway.upstream.openai_base_url,
                "model": "upstream-gpt",
                "api_key": "sk-loopback-" + "6" * 24,
                "price": price,
            }
            context: dict[str, Any] = {"sources": []}
            if session_budget is not None:
                context["budget"] = {"session_max_tokens": session_budget}
            route = {"name": name, "model": {"upstream": name}, "context": context}
            with gateway.api() as api:
                for path, body in (("/api/v1/deployments", deployment), ("/api/v1/routes", route)):
                    response = api.post(path, json=body)
                    assert response.status_code == 201, response.text
            paths.extend([f"/api/v1/routes/{name}", f"/api/v1/deployments/{name}"])
            return name

    yield Make()
    with gateway.api() as api:
        for key in keys:
            api.delete(f"/api/v1/keys/{key}")
        for path in paths:
            api.delete(path)


def key_spend(key_id: str, django_db_blocker: Any) -> tuple[int, int, Decimal, Decimal]:
    from tenants.models import KeySpend

    with django_db_blocker.unblock():
        row = KeySpend.objects.filter(key_id=int(key_id[4:])).values_list(
            "spent_tokens", "reserved_tokens", "spent_usd", "reserved_usd"
        )
        found = list(row)
    assert len(found) == 1, found
    return found[0]


def test_concurrent_calls_never_spend_past_a_keys_token_budget(
    gateway: Gateway, upstream: LoopbackUpstream, made: Any, django_db_blocker: Any
) -> None:
    route = made.route(price=None, session_budget=10**9)
    each = reserved_per_call(gateway, route)  # also makes the deployment known (its margin)
    budget = FITS * each + each // 2
    key = made.key(budget={"max_tokens": budget, "period": "day"})

    answered, refused = split(burst(gateway, key["key"], route), "budget_exceeded")

    assert len(answered) + len(refused) == CONCURRENT
    assert len(answered) >= FITS and refused
    assert all(e.response.headers["x-should-retry"] == "false" for e in refused)
    spent, reserved, _, _ = key_spend(key["id"], django_db_blocker)
    assert spent == sum(c.usage.total_tokens for c in answered)  # settled to the provider's usage
    assert spent <= budget
    assert reserved == 0
    print(
        f"\ntoken budget {budget} ({each}/call): {len(answered)} answered, "
        f"{len(refused)} refused, {spent} spent"
    )
    with gateway.api() as api:
        shown = api.get(f"/api/v1/keys/{key['id']}").json()["spent"]
    assert shown["tokens"] == spent


def test_concurrent_calls_never_spend_past_a_keys_dollar_budget(
    gateway: Gateway, upstream: LoopbackUpstream, made: Any, django_db_blocker: Any
) -> None:
    route = made.route(price=PRICE, session_budget=10**9)
    each = reserved_per_call(gateway, route)
    # The most a call may cost: its whole reservation at the dearer (output) rate, near enough.
    per_call = each * PRICE["output_per_mtok"] / 1_000_000
    budget = round(FITS * per_call + per_call / 2, 4)
    key = made.key(budget={"max_usd": budget, "period": "month"})

    answered, refused = split(burst(gateway, key["key"], route), "budget_exceeded")

    assert len(answered) >= FITS and refused
    price = Price(PRICE["input_per_mtok"], PRICE["output_per_mtok"])
    billed = sum(
        Decimal(
            str(
                cost_usd(
                    price,
                    input_tokens=c.usage.prompt_tokens,
                    output_tokens=c.usage.completion_tokens,
                )
                or 0
            )
        )
        for c in answered
    )
    _, reserved_tokens, spent_usd, reserved_usd = key_spend(key["id"], django_db_blocker)
    assert abs(spent_usd - billed) < Decimal("0.00001") * len(answered)
    assert spent_usd <= Decimal(str(budget))
    assert reserved_tokens == 0 and reserved_usd == 0
    print(
        f"\nUSD budget {budget}: {len(answered)} answered, {len(refused)} refused, "
        f"${spent_usd} spent"
    )


def test_a_usd_budget_refuses_an_unpriced_deployment(gateway: Gateway, made: Any) -> None:
    route = made.route(price=None)
    key = made.key(budget={"max_usd": 10.0})
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)
    assert refused.value.body["code"] == "invalid_request"
    assert route in refused.value.body["message"] and "price" in refused.value.body["message"]
    # A token budget on the same deployment is fine.
    tokens_only = made.key(budget={"max_tokens": 100000})
    client = openai.OpenAI(
        base_url=gateway.openai_base_url, api_key=tokens_only["key"], max_retries=0
    )
    assert client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)


def test_a_keys_requests_a_minute(gateway: Gateway, made: Any) -> None:
    route = made.route(price=None)
    key = made.key(rate_limit={"rpm": 2})
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    for _ in range(2):
        client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)
    assert refused.value.body["code"] == "rate_limited"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    # The REST API counts the same key's requests: its envelope, its Retry-After.
    response = httpx.post(
        f"{gateway.server}/api/v1/resolve",
        json={"route": route, "request": {"messages": budget_messages()}},
        headers={"Authorization": f"Bearer {key['key']}"},
    )
    assert response.status_code == 429 and response.json()["error"]["code"] == "rate_limited"
    assert "Retry-After" in response.headers


def test_a_keys_tokens_a_minute(gateway: Gateway, made: Any) -> None:
    # Each call holds its input and its max_tokens, then counts what it used (about 43 tokens
    # here): a minute of 150 admits three of them, not a fourth.
    route = made.route(price=None)
    key = made.key(rate_limit={"tpm": 150})
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    outcomes: list[Any] = []
    for _ in range(5):
        try:
            outcomes.append(
                client.chat.completions.create(
                    model=route, messages=budget_messages(), max_tokens=16
                )
            )
        except openai.RateLimitError as refused:
            outcomes.append(refused)
    answered, refused = split(outcomes, "rate_limited")
    used = sum(c.usage.total_tokens for c in answered)
    assert answered and refused and used <= 150, (len(answered), used)
    assert "tokens a minute" in refused[0].body["message"]
    assert int(refused[0].response.headers["retry-after"]) >= 1


def test_a_key_revoked_through_the_api_is_refused_by_the_gateway(
    gateway: Gateway, made: Any
) -> None:
    route = made.route(price=None)
    key = made.key()
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    assert client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)
    with gateway.api() as api:
        assert api.delete(f"/api/v1/keys/{key['id']}").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=route, messages=budget_messages(), max_tokens=16)


def test_the_resolves_judge_calls_count_against_the_keys_budget(
    gateway: Gateway, upstream: LoopbackUpstream, made: Any, django_db_blocker: Any
) -> None:
    upstream.answer_with(answering)  # judge calls scored, the others echoed
    user = unique("u")
    route = setup_route(gateway, may_judge=True, user=user)
    key = made.key(budget={"max_tokens": 10**6, "period": "total"})
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=route,
            messages=[{"role": "user", "content": QUESTION}],
            extra_headers={"x-user-id": user},
        )
    finally:
        teardown_route(gateway, route, user)
    answer = raw.parse()
    judge = memory_notes(gateway, raw.headers["x-context-resolve-id"])["judge_usage"]
    assert judge["calls"] == 1
    spent, reserved, _, _ = key_spend(key["id"], django_db_blocker)
    assert spent == answer.usage.total_tokens + judge["input_tokens"] + judge["output_tokens"]
    assert reserved == 0


def test_a_stream_settles_the_keys_budget_with_the_reported_usage(
    gateway: Gateway, upstream: LoopbackUpstream, made: Any, django_db_blocker: Any
) -> None:
    route = made.route(price=PRICE)
    key = made.key(budget={"max_tokens": 10**6, "max_usd": 100.0, "period": "day"})
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=key["key"], max_retries=0)
    stream = client.chat.completions.create(
        model=route,
        messages=budget_messages(),
        max_tokens=MAX_OUTPUT,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
    # A stream settles when it ends on the gateway's side, just after the client read its end.
    deadline = time.monotonic() + SETTLE_WAIT_S
    while (found := key_spend(key["id"], django_db_blocker))[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    spent, reserved, spent_usd, reserved_usd = found
    assert spent == usage.total_tokens and reserved == 0 and reserved_usd == 0
    price = Price(PRICE["input_per_mtok"], PRICE["output_per_mtok"])
    cost = cost_usd(price, input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens)
    assert abs(spent_usd - Decimal(str(cost))) < Decimal("0.00001")
