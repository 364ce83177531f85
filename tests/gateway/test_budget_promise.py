"""The session budget's promise against providers that bill more than the request shows, through
the live gateway and the loopback upstream (``LoopbackUpstream.bill``): the output limit sent
upstream is what the budget granted; a provider that honours it and adds hidden input never makes
a session spend past its budget; one that ignores it overspends only by the calls in flight, each
flagged in its replay record and the metrics; and a report past its reservation widens the
deployment's next reservations. Each test makes its own deployment: the margins a deployment
learns are its own."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.gateway.conftest import Gateway, unique
from tests.upstream import LoopbackUpstream

BUDGET = 1000
CONCURRENT = 40
MAX_OUTPUT = 50
HIDDEN_INPUT = 40  # what the provider adds to every prompt without publishing it
VERBOSE = 10_000  # a model that writes as much as it may
IGNORED = 40_000  # the completion a provider that ignores max_tokens reports


@pytest.fixture
def budget_route(gateway: Gateway, upstream: LoopbackUpstream) -> Iterator[Any]:
    """Make a deployment of its own on the loopback upstream and a route to it with a session
    budget; both removed after."""
    made: list[tuple[str, str]] = []

    def make(
        session_max_tokens: int, *, protocol: str = "openai", model: str = "upstream-gpt"
    ) -> str:
        name = unique("gw-promise")
        deployment = {
            "name": name,
            "protocol": protocol,
            "base_url": upstream.openai_base_url
            if protocol == "openai"
            else upstream.anthropic_base_url,
            "model": model,
            "api_key": "sk-loopback-" + "5" * 24,
        }
        route = {
            "name": name,
            "model": {"upstream": name},
            "context": {"sources": [], "budget": {"session_max_tokens": session_max_tokens}},
        }
        with gateway.api() as api:
            for path, body in (("/api/v1/deployments", deployment), ("/api/v1/routes", route)):
                response = api.post(path, json=body)
                assert response.status_code == 201, response.text
        made.append((name, name))
        return name

    yield make
    with gateway.api() as api:
        for route, deployment in made:
            api.delete(f"/api/v1/routes/{route}")
            api.delete(f"/api/v1/deployments/{deployment}")


def messages() -> list[Any]:
    return [{"role": "user", "content": "How much is left of my budget?"}]


def held(gateway: Gateway, resolve_id: str) -> dict[str, Any]:
    """The reservation and the charge the call's replay record keeps."""
    return dict(gateway.replay(resolve_id)["tokens"]["session_budget"])


def call(gateway: Gateway, route: str, session: str, limits: dict[str, int] | None = None) -> Any:
    """One call (its raw response), with ``limits`` as its output limits (max_tokens MAX_OUTPUT
    when None)."""
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=route,
        messages=messages(),
        extra_headers={"x-session-id": session},
        **({"max_tokens": MAX_OUTPUT} if limits is None else limits),
    )


def burst(gateway: Gateway, route: str, session: str, calls: int = CONCURRENT) -> list[Any]:
    """``calls`` calls of one session at once: each a raw response, or the 429 it got."""

    async def one(client: openai.AsyncOpenAI) -> Any:
        try:
            return await client.chat.completions.with_raw_response.create(
                model=route, messages=messages(), max_tokens=MAX_OUTPUT
            )
        except openai.RateLimitError as refused:
            return refused

    async def all_at_once() -> list[Any]:
        client = openai.AsyncOpenAI(
            base_url=gateway.openai_base_url,
            api_key=gateway.key,
            max_retries=0,
            default_headers={"x-session-id": session},
        )
        async with client:
            return await asyncio.gather(*(one(client) for _ in range(calls)))

    return asyncio.run(all_at_once())


def split(outcomes: list[Any]) -> tuple[list[Any], list[openai.RateLimitError]]:
    refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    for error in refused:
        assert error.status_code == 429
        assert error.body["code"] == "budget_exceeded"
    return [o for o in outcomes if not isinstance(o, openai.RateLimitError)], refused


def exceeded_total(gateway: Gateway, route: str) -> float:
    """``context_budget_reservation_exceeded_total`` of ``route``, as the server exposes it."""
    text = httpx.get(f"{gateway.server}/metrics", timeout=10).text
    pattern = rf'^context_budget_reservation_exceeded_total\{{route="{re.escape(route)}"\}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_concurrent_calls_never_spend_past_the_budget_when_the_provider_honours_max_tokens(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    # A deployment that has never answered: its first call is the one that teaches the gateway
    # what its provider adds, and the burst's other calls wait for its report.
    route = budget_route(BUDGET)
    upstream.bill(hidden_input=HIDDEN_INPUT, completion_tokens=VERBOSE)
    session = unique("shared")
    hits = upstream.hits

    answered, refused = split(burst(gateway, route, session))

    assert answered and refused
    spent, reserved = spend(session)
    assert reserved == 0  # every reservation settled or released
    assert spent == sum(raw.parse().usage.total_tokens for raw in answered)  # the bill
    assert spent <= BUDGET, spent
    sent = [seen.body["max_tokens"] for seen in upstream.requests[hits:]]
    assert len(sent) == len(answered)
    assert all(0 < limit <= MAX_OUTPUT for limit in sent)
    records = [held(gateway, raw.headers["x-context-resolve-id"]) for raw in answered]
    # Only the probe reserved without knowing the hidden input; every other call held it.
    exceeded = [record for record in records if record["reservation_exceeded"]]
    assert len(exceeded) == 1, records
    assert exceeded[0]["exceeded_by"] <= HIDDEN_INPUT
    for record in records:
        if record is not exceeded[0]:
            assert record["charged"] <= record["reserved"], record


def test_a_provider_that_ignores_max_tokens_overspends_only_by_the_calls_in_flight(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(BUDGET)
    upstream.bill(completion_tokens=IGNORED, honours_max_tokens=False)
    counted_before = exceeded_total(gateway, route)
    session = unique("ignored")

    answered, _ = split(burst(gateway, route, session))

    assert answered
    spent, reserved = spend(session)
    assert reserved == 0
    assert spent == sum(raw.parse().usage.total_tokens for raw in answered)
    records = [held(gateway, raw.headers["x-context-resolve-id"]) for raw in answered]
    # What the answered calls held fit in the budget together: the overspend is what their
    # provider charged past it, and nothing else.
    assert sum(record["reserved"] for record in records) <= BUDGET
    for record, raw in zip(records, answered, strict=True):
        assert record["charged"] == raw.parse().usage.total_tokens
        assert record["reservation_exceeded"] is True
        assert record["exceeded_by"] == record["charged"] - record["reserved"]
    assert exceeded_total(gateway, route) == counted_before + len(answered)

    # The session is spent: no further call reaches the provider, the spend stays.
    hits = upstream.hits
    again, refused = split(burst(gateway, route, session, calls=10))
    assert not again and len(refused) == 10
    assert upstream.hits == hits
    assert spend(session) == (spent, 0)


def test_a_report_past_its_reservation_widens_the_deployments_next_reservations(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any
) -> None:
    # An exact tokenizer's deployment: its calibration does not move its counts, the margin does.
    route = budget_route(10**6, model="gpt-4o-mini")
    upstream.bill(hidden_input=300, completion_tokens=VERBOSE)
    first = held(gateway, call(gateway, route, unique("a")).headers["x-context-resolve-id"])
    assert first["reservation_exceeded"] is True
    second = held(gateway, call(gateway, route, unique("b")).headers["x-context-resolve-id"])
    assert second["reserved"] > first["reserved"], (first, second)
    assert second["reservation_exceeded"] is False, (first, second)  # the same request: covered

    # Output past the limit sent: the reservations hold more beside the allowance.
    upstream.bill(hidden_input=300, completion_tokens=MAX_OUTPUT * 3, honours_max_tokens=False)
    third = held(gateway, call(gateway, route, unique("c")).headers["x-context-resolve-id"])
    assert third["reservation_exceeded"] is True
    fourth = held(gateway, call(gateway, route, unique("d")).headers["x-context-resolve-id"])
    assert fourth["reserved"] > third["reserved"]
    assert fourth["output_allowance"] == MAX_OUTPUT  # what the call may answer did not change
    assert fourth["reservation_exceeded"] is False


def test_the_output_limit_sent_upstream_is_what_the_budget_has_left(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(300)
    session = unique("left")
    # OpenAI's newer field: lowered to what is left after the input.
    raw = call(gateway, route, session, {"max_completion_tokens": 5000})
    record = held(gateway, raw.headers["x-context-resolve-id"])
    sent = upstream.last.body
    assert "max_tokens" not in sent
    assert sent["max_completion_tokens"] == record["output_allowance"] < 300
    assert record["reserved"] == 300  # the whole budget: its input and the rest as the allowance
    spent, _ = spend(session)

    # No limit at all: the one the budget leaves is added.
    raw = call(gateway, route, session, {})
    record = held(gateway, raw.headers["x-context-resolve-id"])
    assert upstream.last.body["max_tokens"] == record["output_allowance"]
    assert record["reserved"] == 300 - spent


def test_an_anthropic_stream_is_sent_the_allowance_and_the_tool_prompt_is_reserved(
    gateway: Gateway, upstream: LoopbackUpstream, budget_route: Any, spend: Any
) -> None:
    route = budget_route(10**6, protocol="anthropic", model="claude-sonnet-4-5")
    client = anthropic.Anthropic(base_url=gateway.server, api_key=gateway.key, max_retries=0)
    tool = {"name": "lookup", "description": "Look it up.", "input_schema": {"type": "object"}}

    def reserved(session: str, **extra: Any) -> dict[str, Any]:
        with client.messages.with_streaming_response.create(
            model=route,
            max_tokens=MAX_OUTPUT,
            messages=messages(),
            stream=True,
            extra_headers={"x-session-id": session},
            **extra,
        ) as response:
            response.read()
            return held(gateway, response.headers["x-context-resolve-id"])

    plain = reserved(unique("plain"))
    assert upstream.last.body["max_tokens"] == MAX_OUTPUT
    with_tools = reserved(unique("tools"), tools=[tool])
    # Anthropic's published tool-use system prompt of Claude 4 models (tool choice auto): 346.
    assert with_tools["reserved"] - plain["reserved"] >= 346
    forced = reserved(unique("forced"), tools=[tool], tool_choice={"type": "any"})
    assert forced["reserved"] - plain["reserved"] >= 313
    assert forced["reserved"] < with_tools["reserved"]
