"""Spend through the live gateway: the replay record of a call carries the provider's usage, its
cost at the answering deployment's price, the deployment, the calling key and the whole call's
time; ``GET /api/v1/spend`` sums it; and ``/metrics`` moves with every call (calls by route,
deployment and status, upstream latency and time to first token, tokens, cost, fallbacks)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from contextplatform.deployments.pricing import Price, cost_usd
from tests.gateway.conftest import OPENAI_KEY, RULE, Gateway, unique
from tests.upstream import LoopbackUpstream, running_upstream

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
ARRIVAL_S = 20  # an upper bound for a stream's record to be completed, not a measured time


def priced_cost(input_tokens: int, output_tokens: int) -> float | None:
    price = Price(PRICE["input_per_mtok"], PRICE["output_per_mtok"])
    return cost_usd(price, input_tokens=input_tokens, output_tokens=output_tokens)


@pytest.fixture
def priced(gateway: Gateway) -> Iterator[tuple[str, str]]:
    """A route over a priced deployment: (route, deployment)."""
    name = unique("priced")
    deployment = {
        "name": name,
        "protocol": "openai",
        "base_url": gateway.upstream.openai_base_url,
        "model": "loopback-model",
        "api_key": OPENAI_KEY,
        "price": PRICE,
    }
    rules = {"type": "skill_guardrails", "name": "rules", "texts": [RULE]}
    route = {"name": name, "model": {"upstream": name}, "context": {"sources": [rules]}}
    with gateway.api() as api:
        assert api.post("/api/v1/deployments", json=deployment).status_code == 201
        assert api.post("/api/v1/routes", json=route).status_code == 201
        try:
            yield name, name
        finally:
            api.delete(f"/api/v1/routes/{name}")
            api.delete(f"/api/v1/deployments/{name}")


def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)


def completed(gateway: Gateway, resolve_id: str) -> dict[str, Any]:
    """The record once the call's usage is in it."""
    return gateway.recorded(resolve_id, lambda record: bool(record["usage"]["input_tokens"]))


def series(gateway: Gateway, name: str, **labels: str) -> float:
    """One series of the server's exposition (0 when it has none yet)."""
    text = httpx.get(f"{gateway.server}/metrics", timeout=10).text
    wanted = {f'{key}="{value}"' for key, value in labels.items()}
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        if wanted <= set(match.group(1).split(",")):
            total += float(match.group(2))
    return total


def test_a_call_records_its_usage_cost_deployment_key_and_time(
    gateway: Gateway, upstream: LoopbackUpstream, priced: tuple[str, str]
) -> None:
    route, deployment = priced
    raw = client(gateway).chat.completions.with_raw_response.create(
        model=route, messages=[{"role": "user", "content": "What does it cost?"}]
    )
    usage = raw.parse().usage
    assert usage is not None
    record = completed(gateway, raw.headers["x-context-resolve-id"])
    assert record["usage"] == {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
    }
    expected = priced_cost(usage.prompt_tokens, usage.completion_tokens)
    assert expected and record["cost_usd"] == pytest.approx(expected)
    assert record["cost_breakdown"] == {
        "model": pytest.approx(expected),
        "judge": None,
        "compression": None,
    }
    assert record["deployment"] == deployment
    assert isinstance(record["key_id"], int)
    # The whole call, the deployment's answer included, is longer than the resolve alone.
    assert record["call_ms"] is not None and record["call_ms"] >= record["ms"]

    with gateway.api() as api:
        response = api.get("/api/v1/spend", params={"group_by": "deployment"})
    assert response.status_code == 200, response.text
    row = next(row for row in response.json()["rows"] if row["group"] == deployment)
    assert row["requests"] == 1 and row["cost_usd"] == pytest.approx(expected)
    assert row["input_tokens"] == usage.prompt_tokens


def test_a_stream_records_its_usage_and_cost(
    gateway: Gateway, upstream: LoopbackUpstream, priced: tuple[str, str]
) -> None:
    route, deployment = priced
    raw = client(gateway).chat.completions.with_raw_response.create(
        model=route,
        messages=[{"role": "user", "content": "Stream the cost"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    (usage,) = [chunk.usage for chunk in raw.parse() if chunk.usage is not None]
    record = completed(gateway, raw.headers["x-context-resolve-id"])
    assert record["usage"]["input_tokens"] == usage.prompt_tokens
    assert record["usage"]["output_tokens"] == usage.completion_tokens
    assert record["cost_usd"] == pytest.approx(
        priced_cost(usage.prompt_tokens, usage.completion_tokens)
    )
    assert record["deployment"] == deployment and record["call_ms"] >= record["ms"]


def test_metrics_move_with_calls_tokens_cost_latency_and_first_tokens(
    gateway: Gateway, upstream: LoopbackUpstream, priced: tuple[str, str]
) -> None:
    route, deployment = priced
    calls = dict(route=route, deployment=deployment, status="ok")
    assert series(gateway, "context_gateway_calls_total", **calls) == 0
    answer = client(gateway).chat.completions.create(
        model=route, messages=[{"role": "user", "content": "count me"}]
    )
    assert answer.usage is not None
    stream = client(gateway).chat.completions.create(
        model=route,
        messages=[{"role": "user", "content": "count me streaming"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    (streamed,) = [chunk.usage for chunk in stream if chunk.usage is not None]

    deadline = time.monotonic() + ARRIVAL_S  # the stream's call is counted once it ended
    while series(gateway, "context_gateway_calls_total", **calls) < 2:
        assert time.monotonic() < deadline, "the stream's call was never counted"
        time.sleep(0.05)
    tokens_in = answer.usage.prompt_tokens + streamed.prompt_tokens
    tokens_out = answer.usage.completion_tokens + streamed.completion_tokens
    where = dict(route=route, deployment=deployment)
    assert series(gateway, "context_gateway_tokens_total", **where, kind="input") == tokens_in
    assert series(gateway, "context_gateway_tokens_total", **where, kind="output") == tokens_out
    assert series(gateway, "context_gateway_cost_usd_total", **where) == pytest.approx(
        priced_cost(tokens_in, tokens_out)
    )
    latency = "context_gateway_upstream_seconds_count"
    assert series(gateway, latency, deployment=deployment) == 2
    first_token = "context_gateway_time_to_first_token_seconds_count"
    assert series(gateway, first_token, deployment=deployment) == 1


def test_a_fallback_and_a_failed_call_are_counted(gateway: Gateway) -> None:
    with running_upstream() as failing, running_upstream() as answering, gateway.api() as api:
        names = [unique("fb-spend"), unique("fb-spend")]
        for name, upstream in zip(names, (failing, answering), strict=True):
            body = {
                "name": name,
                "protocol": "openai",
                "base_url": upstream.openai_base_url,
                "model": "loopback-model",
                "api_key": OPENAI_KEY,
            }
            assert api.post("/api/v1/deployments", json=body).status_code == 201
        route = unique("gw-fb-spend")
        assert (
            api.post("/api/v1/routes", json={"name": route, "model": {"upstream": names}})
        ).status_code == 201
        try:
            failing.fail(503)
            chat = {"model": route, "messages": [{"role": "user", "content": "hello"}]}
            assert api.post("/v1/chat/completions", json=chat).status_code == 200
            moved = series(
                gateway, "context_gateway_fallbacks_total", deployment=names[0], outcome="status"
            )
            assert moved == 1
            ok = dict(route=route, deployment=names[1], status="ok")
            assert series(gateway, "context_gateway_calls_total", **ok) == 1

            answering.fail(503)  # both fail (the first still cooling: tried last)
            assert api.post("/v1/chat/completions", json=chat).status_code >= 500
            failed = dict(route=route, status="failed")
            assert series(gateway, "context_gateway_calls_total", **failed) == 1
        finally:
            api.delete(f"/api/v1/routes/{route}")
            for name in names:
                api.delete(f"/api/v1/deployments/{name}")
