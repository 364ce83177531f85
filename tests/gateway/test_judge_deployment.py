"""The decision model judges, through the gateway: a route whose memory source has a judge block
naming no deployment sends that stage's candidates to the route's own deployment (one batched
call, then the forwarded call), unless the deployment may not judge; the replay record says which
judge ran. The official openai client against the live server and the loopback upstream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.gateway.conftest import OPENAI_KEY, Gateway, unique
from tests.upstream import LoopbackUpstream, echo, prompt_tokens

QUESTION = "Which headphones do I own?"
MEMORIES = [
    "User owns noise-cancelling headphones bought in March.",
    "User prefers window seats on flights.",
]
DOCUMENT = re.compile(r'<document index="(\d+)"[^>]*>\n(.*?)\n</document>', re.S)


def judge_prompt(body: dict[str, Any]) -> str | None:
    """The batch prompt of a judge call (its system message is the judge's), else None."""
    text = json.dumps(body.get("messages", [])[:1])
    if "relevance judge" not in text:
        return None
    return str(body["messages"][-1]["content"])


def answering(body: dict[str, Any]) -> str:
    """Judge calls get one score per document (the headphones memory relevant), others the echo."""
    prompt = judge_prompt(body)
    if prompt is None:
        return echo(body)
    texts = [text for _, text in DOCUMENT.findall(prompt)]
    return json.dumps({"scores": [0.9 if "headphones" in text else 0.1 for text in texts]})


@pytest.fixture
def judging(upstream: LoopbackUpstream) -> Iterator[LoopbackUpstream]:
    upstream.answer_with(answering)
    yield upstream


PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}


def model_cost_of(usage: dict[str, Any]) -> float:
    """What the record's model usage costs at the route deployment's PRICE (USD)."""
    return (
        usage["input_tokens"] * PRICE["input_per_mtok"]
        + usage["output_tokens"] * PRICE["output_per_mtok"]
    ) / 1e6


def setup_route(
    gateway: Gateway, *, may_judge: bool, user: str, price: dict[str, float] | None = None
) -> str:
    """A deployment on the upstream, a route forwarding to it with a judged memory source, and
    the user's memories; the route's name."""
    name = unique("judged")
    with gateway.api() as api:
        deployment = {
            "name": name,
            "protocol": "openai",
            "base_url": gateway.upstream.openai_base_url,
            "model": "upstream-judge",
            "api_key": OPENAI_KEY,
            "may_judge": may_judge,
            **({"price": price} if price is not None else {}),
        }
        assert api.post("/api/v1/deployments", json=deployment).status_code == 201
        memory = {
            "type": "memory",
            "name": "memories",
            "timeout_ms": 10_000,
            "match": {
                "recall": {"top_k": 5, "min_similarity": -1},
                "judge": {"top_k": 2, "min_score": 0.5},
            },
        }
        route = {"name": name, "model": {"upstream": name}, "context": {"sources": [memory]}}
        response = api.post("/api/v1/routes", json=route)
        assert response.status_code == 201, response.text
        for content in MEMORIES:
            created = api.post(f"/api/v1/users/{user}/memories", json={"content": content})
            assert created.status_code == 201, created.text
    return name


def teardown_route(gateway: Gateway, name: str, user: str) -> None:
    with gateway.api() as api:
        api.delete(f"/api/v1/routes/{name}")
        api.delete(f"/api/v1/deployments/{name}")
        api.delete(f"/api/v1/users/{user}/memories")


def call(gateway: Gateway, route: str, user: str) -> str:
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=route,
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"x-user-id": user},
    )
    assert raw.parse().choices[0].message.content
    return str(raw.headers["x-context-resolve-id"])


def memory_notes(gateway: Gateway, resolve_id: str) -> dict[str, Any]:
    record = gateway.replay(resolve_id)
    source = next(s for s in record["sources"] if s["name"] == "memories")
    return dict(source["notes"])


def test_the_routes_deployment_judges_then_answers(
    gateway: Gateway, judging: LoopbackUpstream
) -> None:
    user = unique("u")
    route = setup_route(gateway, may_judge=True, user=user, price=PRICE)
    before = judging.hits  # the upstream is the package's: earlier tests' requests stay
    try:
        resolve_id = call(gateway, route, user)
        record = gateway.replay(resolve_id)
    finally:
        teardown_route(gateway, route, user)
    seen = judging.requests[before:]
    judge_calls = [s for s in seen if judge_prompt(s.body) is not None]
    forwarded = [s for s in seen if judge_prompt(s.body) is None]
    assert len(judge_calls) == len(forwarded) == 1  # one batched judge call, one forward
    [judged] = judge_calls
    assert judged.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert sorted(t for _, t in DOCUMENT.findall(judge_prompt(judged.body) or "")) == sorted(
        MEMORIES
    )
    sent = json.dumps(forwarded[0].body)
    assert "noise-cancelling headphones" in sent  # kept by the judge's score
    assert "window seats" not in sent  # dropped by it
    notes = memory_notes(gateway, resolve_id)
    assert (notes["judge"], notes["judge_fallback"]) == (f"deployment:{route}", False)
    # The judge's call, the tokens its answer reported, and their cost at its deployment's price.
    judge_in, judge_out = prompt_tokens(judged.body), notes["judge_usage"]["output_tokens"]
    judge_cost = (judge_in * PRICE["input_per_mtok"] + judge_out * PRICE["output_per_mtok"]) / 1e6
    assert notes["judge_usage"] == {
        "calls": 1,
        "input_tokens": judge_in,
        "output_tokens": judge_out,
        "cost_usd": pytest.approx(judge_cost),
    }
    assert judge_out > 0
    # The record's cost: the answer's calls and the judge's, each part named.
    model_cost = model_cost_of(record["usage"])
    assert record["cost_breakdown"] == {
        "model": pytest.approx(model_cost),
        "judge": pytest.approx(judge_cost),
        "compression": None,
    }
    assert record["cost_usd"] == pytest.approx(model_cost + judge_cost)


def test_the_preview_reports_the_judges_calls_per_source(
    gateway: Gateway, judging: LoopbackUpstream
) -> None:
    user = unique("u")
    route = setup_route(gateway, may_judge=True, user=user)
    before = judging.hits
    try:
        with gateway.api() as api:
            response = api.post(
                "/api/v1/plugins/context/preview",
                json={"route": route, "query": QUESTION, "user": user},
            )
    finally:
        teardown_route(gateway, route, user)
    assert response.status_code == 200, response.text
    [judged] = [s for s in judging.requests[before:] if judge_prompt(s.body) is not None]
    [source] = [s for s in response.json()["sources"] if s["name"] == "memories"]
    usage = source["judge_usage"]
    assert usage["calls"] == 1 and usage["cost_usd"] is None
    assert usage["input_tokens"] == prompt_tokens(judged.body) and usage["output_tokens"] > 0


def test_a_deployment_that_may_not_judge_is_only_forwarded_to(
    gateway: Gateway, judging: LoopbackUpstream
) -> None:
    user = unique("u")
    route = setup_route(gateway, may_judge=False, user=user)
    before = judging.hits
    try:
        resolve_id = call(gateway, route, user)
    finally:
        teardown_route(gateway, route, user)
    assert [judge_prompt(s.body) for s in judging.requests[before:]] == [None]  # the forward
    notes = memory_notes(gateway, resolve_id)
    assert notes["judge"] == "local" and "judge_usage" not in notes


# ---------------------------------------------------------------- the compress stage's judge

JUDGE_PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}


def tool_turn(call_id: str, lines: str) -> list[dict[str, Any]]:
    """An assistant's call of a tool and its (long) output."""
    call = {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": lines},
    ]


def test_the_compress_stages_judge_is_priced_into_the_records_cost(
    gateway: Gateway, judging: LoopbackUpstream
) -> None:
    """A compress block whose judge names a deployment: its call's tokens at that deployment's
    price are a part of the record's cost of their own, beside the model's."""
    name = unique("compress-judged")
    judge = f"{name}-judge"
    deployments = [
        {"name": name, "price": PRICE},
        {"name": judge, "price": JUDGE_PRICE},
    ]
    compress = {
        "mode": "always",
        "targets": {"tool_outputs": {"mode": "extractive", "min_tokens": 100, "target_tokens": 50}},
        "match": {"judge": {"deployment": judge}},
    }
    headphones = "\n".join(f"headphones order {i} shipped to the customer" for i in range(60))
    seats = "\n".join(f"seat {i} on the flight is by the window" for i in range(60))
    messages = [
        {"role": "user", "content": QUESTION},
        *tool_turn("call_a", headphones),
        *tool_turn("call_b", seats),
        {"role": "user", "content": QUESTION},
    ]
    before = judging.hits
    with gateway.api() as api:
        for deployment in deployments:
            body = {
                "protocol": "openai",
                "base_url": gateway.upstream.openai_base_url,
                "model": "upstream-judge",
                "api_key": OPENAI_KEY,
                **deployment,
            }
            created = api.post("/api/v1/deployments", json=body)
            assert created.status_code == 201, created.text
        route = {"name": name, "model": {"upstream": name}, "context": {"compress": compress}}
        assert api.post("/api/v1/routes", json=route).status_code == 201
        try:
            client = openai.OpenAI(
                base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0
            )
            raw = client.chat.completions.with_raw_response.create(
                model=name,
                messages=messages,  # type: ignore[arg-type]
            )
            record = gateway.replay(raw.headers["x-context-resolve-id"])
        finally:
            api.delete(f"/api/v1/routes/{name}")
            for deployment in deployments:
                api.delete(f"/api/v1/deployments/{deployment['name']}")
    [judged] = [s for s in judging.requests[before:] if judge_prompt(s.body) is not None]
    compression = record["compression"]
    assert compression["applied"] is True and compression["judge"] == f"deployment:{judge}"
    judge_in, judge_out = prompt_tokens(judged.body), compression["judge_usage"]["output_tokens"]
    judge_cost = (
        judge_in * JUDGE_PRICE["input_per_mtok"] + judge_out * JUDGE_PRICE["output_per_mtok"]
    ) / 1e6
    assert judge_out > 0
    assert compression["judge_usage"] == {
        "calls": 1,
        "input_tokens": judge_in,
        "output_tokens": judge_out,
        "cost_usd": pytest.approx(judge_cost),
    }
    model_cost = model_cost_of(record["usage"])
    assert record["cost_breakdown"] == {
        "model": pytest.approx(model_cost),
        "judge": None,  # no source asked the relevance judge
        "compression": pytest.approx(judge_cost),
    }
    assert record["cost_usd"] == pytest.approx(model_cost + judge_cost)
