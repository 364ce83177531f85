"""``GET /v1/models/{model}`` (``client.models.retrieve``) and ``POST /v1/messages/count_tokens``
(``client.messages.count_tokens``) with the official clients against the live server: one route
as OpenAI's model object, and an Anthropic body counted as the route would send it (its context
resolved, no judge asked, nothing forwarded, nothing written)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import TENANT_KEYS
from tests.gateway.conftest import OPENAI_KEY, RULE, Gateway, unique
from tests.gateway.test_views import anthropic_client, openai_client
from tests.upstream import LoopbackUpstream

QUESTION = "Which headphones do I own?"
MEMORIES = [
    "User owns noise-cancelling headphones bought in March, the model XM-5000 in matte black.",
    "User prefers window seats on long flights and always travels with a spare charger.",
]


# --- GET /v1/models/{model} ----------------------------------------------------------------------


def test_a_route_is_retrieved_as_the_list_shows_it(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    client = openai_client(gateway)
    listed = {model.id: model for model in client.models.list()}
    model = client.models.retrieve(gateway.anthropic_route)
    assert model.id == gateway.anthropic_route
    assert model.object == "model"
    assert model.model_dump() == listed[gateway.anthropic_route].model_dump()
    assert model.created > 0 and model.owned_by


def test_an_unknown_model_is_openais_not_found(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client(gateway).models.retrieve(unique("no-such-route"))
    assert missing.value.code == "not_found"
    assert missing.value.param == "model"
    assert (
        isinstance(missing.value.body, dict) and "does not exist" in missing.value.body["message"]
    )


def test_another_tenant_cannot_retrieve_the_route(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    globex = openai.OpenAI(
        base_url=gateway.openai_base_url, api_key=TENANT_KEYS["globex"], max_retries=0
    )
    with pytest.raises(openai.NotFoundError):
        globex.models.retrieve(gateway.openai_route)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=gateway.openai_base_url, api_key="sk-not-a-key", max_retries=0
        ).models.retrieve(gateway.openai_route)


def test_a_model_name_with_a_nul_is_a_bad_request(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    with gateway.api() as api:
        response = api.get("/v1/models/bad%00name")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "model"


# --- POST /v1/messages/count_tokens --------------------------------------------------------------


def records_of(gateway: Gateway, route: str) -> int:
    with gateway.api() as api:
        response = api.get("/api/v1/replay", params={"route": route})
    assert response.status_code == 200, response.text
    return len(response.json()["data"])


def test_the_count_is_of_the_body_the_route_sends(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    """The count is the token count the call's own resolve reports for the body it sent, and it
    includes the route's context; counting forwards nothing and writes no record or session."""
    session, user = unique("s"), unique("u")
    client = anthropic_client(gateway, **{"x-session-id": session, "x-user-id": user})
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    hits, records = upstream.hits, records_of(gateway, gateway.anthropic_route)

    counted = client.messages.count_tokens(
        model=gateway.anthropic_route, messages=messages, extra_body={"max_tokens": 64}
    )

    assert upstream.hits == hits  # nothing forwarded
    assert records_of(gateway, gateway.anthropic_route) == records  # no replay record
    assert gateway.session(session, user) == []  # no session turn
    raw = client.messages.with_raw_response.create(
        model=gateway.anthropic_route, max_tokens=64, messages=messages
    )
    assert RULE in str(upstream.last.body)
    record = gateway.replay(raw.headers["x-context-resolve-id"])
    assert counted.input_tokens == record["tokens"]["after"]
    assert counted.input_tokens > record["tokens"]["before"]  # the route's context is counted


def test_the_route_comes_from_the_header_and_needs_no_max_tokens(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    client = anthropic_client(gateway, **{"x-route": gateway.anthropic_route})
    counted = client.messages.count_tokens(
        model="anything", messages=[{"role": "user", "content": QUESTION}]
    )
    assert counted.input_tokens > 0


def test_count_refusals_come_in_anthropics_shape(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    client = anthropic_client(gateway)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.count_tokens(model=unique("no-such-route"), messages=messages)
    body: Any = missing.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error" and body["error"]["code"] == "not_found"
    with pytest.raises(anthropic.BadRequestError) as mismatch:
        client.messages.count_tokens(model=gateway.openai_route, messages=messages)
    assert mismatch.value.response.headers["x-context-error-code"] == "protocol_mismatch"
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.count_tokens(
            model=gateway.anthropic_route,
            messages=[{"role": "robot", "content": "hi"}],  # type: ignore[typeddict-item]
        )
    assert "role" in str(bad.value)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=gateway.server, api_key="sk-not-a-key", max_retries=0
        ).messages.count_tokens(model=gateway.anthropic_route, messages=messages)


@pytest.fixture
def judged_route(gateway: Gateway) -> Iterator[tuple[str, str]]:
    """An Anthropic route whose memory source is judged by a deployment on the upstream (a
    judge call would reach it), and a user with memories: (route, user)."""
    name, user = unique("counted"), unique("u")
    with gateway.api() as api:
        judge = {
            "name": f"{name}-judge",
            "protocol": "openai",
            "base_url": gateway.upstream.openai_base_url,
            "model": "upstream-judge",
            "api_key": OPENAI_KEY,
            "may_judge": True,
        }
        assert api.post("/api/v1/deployments", json=judge).status_code == 201
        memory = {
            "type": "memory",
            "name": "memories",
            "timeout_ms": 10_000,
            "match": {
                "recall": {"top_k": 5, "min_similarity": -1},
                "judge": {"top_k": 2, "min_score": 0.0, "deployment": judge["name"]},
            },
        }
        route = {
            "name": name,
            "model": {"upstream": gateway.upstream_of(gateway.anthropic_route)},
            "context": {"sources": [memory]},
        }
        response = api.post("/api/v1/routes", json=route)
        assert response.status_code == 201, response.text
        for content in MEMORIES:
            created = api.post(f"/api/v1/users/{user}/memories", json={"content": content})
            assert created.status_code == 201, created.text
        try:
            yield name, user
        finally:
            api.delete(f"/api/v1/routes/{name}")
            api.delete(f"/api/v1/deployments/{judge['name']}")
            api.delete(f"/api/v1/users/{user}/memories")


def test_a_count_fetches_the_sources_and_asks_no_judge(
    gateway: Gateway, upstream: LoopbackUpstream, judged_route: tuple[str, str]
) -> None:
    route, user = judged_route
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    hits = upstream.hits
    with_memories = anthropic_client(gateway, **{"x-user-id": user}).messages.count_tokens(
        model=route, messages=messages
    )
    without = anthropic_client(gateway, **{"x-user-id": unique("u")}).messages.count_tokens(
        model=route, messages=messages
    )
    assert upstream.hits == hits  # neither the judge nor the model was asked
    assert with_memories.input_tokens > without.input_tokens  # the memories were counted
    with gateway.api() as api:
        memories = api.get(f"/api/v1/users/{user}/memories").json()["data"]
    assert all(memory.get("last_used_at") is None for memory in memories)
