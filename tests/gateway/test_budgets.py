"""Session budgets through the live gateway: a route's ``budget.session_max_tokens`` holds against
concurrent calls (the reservation is one atomic statement), refusals are 429 ``budget_exceeded``
in the provider's shape, and every call ends with its reservation settled or released."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from contextplatform.routes.models import Route, TenantDefaults
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
from tests.upstream import LoopbackUpstream


@pytest.fixture
def budget_route(gateway: Gateway) -> Iterator[Any]:
    """Make routes forwarding to the package's deployments with a session budget; removed after."""
    made: list[str] = []

    def make(session_max_tokens: int, like: str) -> str:
        name = unique("gw-budget")
        body = {
            "name": name,
            "model": {"upstream": gateway.upstream_of(like)},
            "context": {"sources": [], "budget": {"session_max_tokens": session_max_tokens}},
        }
        with gateway.api() as api:
            response = api.post("/api/v1/routes", json=body)
        assert response.status_code == 201, response.text
        made.append(name)
        return name

    yield make
    with gateway.api() as api:
        for name in made:
            api.delete(f"/api/v1/routes/{name}")


def set_budget(gateway: Gateway, route: str, session_max_tokens: int) -> None:
    with gateway.api() as api:
        response = api.patch(
            f"/api/v1/routes/{route}",
            json={"context": {"budget": {"session_max_tokens": session_max_tokens}}},
        )
    assert response.status_code == 200, response.text


def test_concurrent_calls_never_spend_more_than_the_session_budget(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(10**9, like=gateway.openai_route)
    # One call measures the worst case this route's calls reserve (the same request each time).
    reserved_each = reserved_per_call(gateway, route)
    budget = FITS * reserved_each + reserved_each // 2
    set_budget(gateway, route, budget)

    session = unique("shared")
    calls = burst(gateway, gateway.key, route, headers={"x-session-id": session})

    answered, refused = split(calls, "budget_exceeded")
    assert len(answered) + len(refused) == CONCURRENT
    assert len(answered) >= FITS  # whatever the order, the first FITS reservations fit
    assert refused, "the budget holds far fewer than 20 calls"
    assert all(e.response.headers["x-should-retry"] == "false" for e in refused)
    used = sum(completion.usage.total_tokens for completion in answered)
    spent, reserved = spend(session)
    assert spent == used  # settled with the provider's usage
    assert spent <= budget
    assert reserved == 0  # every reservation settled or released


def test_a_request_larger_than_the_whole_budget_is_refused_in_anthropics_shape(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(20, like=gateway.anthropic_route)  # less than the request's input
    session = unique("tiny")
    client = anthropic.Anthropic(
        base_url=gateway.server,
        api_key=gateway.key,
        max_retries=0,
        default_headers={"x-session-id": session},
    )
    hits = upstream.hits
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model=route, max_tokens=MAX_OUTPUT, messages=budget_messages())
    assert refused.value.status_code == 429
    assert refused.value.body["error"]["type"] == "rate_limit_error"
    assert "more than the session budget of 20 tokens" in refused.value.body["error"]["message"]
    assert upstream.hits == hits  # refused before dispatch
    assert spend(session) == (0, 0)


def test_a_stream_settles_with_the_usage_the_provider_reported(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(100_000, like=gateway.anthropic_route)
    session, user = unique("stream"), unique("u")
    client = anthropic.Anthropic(
        base_url=gateway.server,
        api_key=gateway.key,
        max_retries=0,
        default_headers={"x-session-id": session, "x-user-id": user},
    )
    with client.messages.stream(
        model=route, max_tokens=MAX_OUTPUT, messages=budget_messages()
    ) as stream:
        final = stream.get_final_message()
    reported = final.usage.input_tokens + final.usage.output_tokens
    assert spend(session, user) == (reported, 0)
    assert spend(session) == (0, 0)  # the budget is the user's session, not the session id's


def test_a_failed_call_releases_its_reservation(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(100_000, like=gateway.openai_route)
    session = unique("failed")
    client = openai.OpenAI(
        base_url=gateway.openai_base_url,
        api_key=gateway.key,
        max_retries=0,
        default_headers={"x-session-id": session},
    )
    upstream.fail(500)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model=route, messages=budget_messages(), max_tokens=MAX_OUTPUT
        )
    assert failed.value.status_code == 502
    assert spend(session) == (0, 0)
    upstream.behave()
    completion = client.chat.completions.create(
        model=route, messages=budget_messages(), max_tokens=MAX_OUTPUT
    )
    assert completion.usage is not None
    assert spend(session) == (completion.usage.total_tokens, 0)


def test_calls_without_a_session_are_not_counted(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any
) -> None:
    route = budget_route(1, like=gateway.openai_route)
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)
    completion = client.chat.completions.create(
        model=route, messages=budget_messages(), max_tokens=MAX_OUTPUT
    )
    assert completion.choices[0].message.content


def test_tenant_defaults_set_the_session_budget_of_every_route(in_acme: Any) -> None:
    TenantDefaults.objects.create(context={"budget": {"session_max_tokens": 5000}})
    inherits = Route.objects.create(name="inherits", context={"budget": {"context_tokens": 100}})
    writes = Route.objects.create(name="writes", context={"budget": {"session_max_tokens": 10}})
    assert inherits.spec().context.budget.session_max_tokens == 5000
    assert writes.spec().context.budget.session_max_tokens == 10
