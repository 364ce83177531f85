"""The LLM extractor asking a tenant's deployment: a route's memory store names it as its
``extractor``, and the write after the response calls it (OpenAI or Anthropic protocol, its key
in that protocol's header) through the outbound guard with the tenant's allow-list; the tenant's
deployment wins over a platform one of the same name, and a name that is neither is the turn's
error. Against the loopback upstream (``tests/upstream.py``), through the real resolve and
hand-back endpoints (the write runs eagerly in tests)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context

from memory.extraction.llm import LLMExtractor
from memory.extraction.types import ExtractionError
from memory.models import MemoryTurn
from tests.conftest import ApiClient, TenantFixture
from tests.fake_models import chat_reply
from tests.loopback import LOOPBACK, outbound_allowlist, running_service
from tests.upstream import ANTHROPIC_PATH, LoopbackUpstream, running_upstream

KEYS = {"openai": "sk-extract-openai-" + "3" * 20, "anthropic": "sk-ant-extract-" + "4" * 20}
USER_TEXT = "I love jazz, and I moved to Lyon last May."
DECISIONS = [
    {"action": "add", "content": "User loves jazz", "kind": "preference"},
    {"action": "add", "content": "User moved to Lyon in May", "kind": "event"},
]


@pytest.fixture
def upstream() -> Iterator[LoopbackUpstream]:
    with running_upstream() as running:
        running.answer_with(lambda body: json.dumps({"decisions": DECISIONS}))
        yield running


def create_deployment(
    api: ApiClient,
    upstream: LoopbackUpstream,
    name: str = "extractor-dep",
    protocol: str = "openai",
) -> None:
    base = upstream.anthropic_base_url if protocol == "anthropic" else upstream.openai_base_url
    body = {
        "name": name,
        "protocol": protocol,
        "base_url": base,
        "model": f"{protocol}-extractor-model",
        "api_key": KEYS[protocol],
        "timeout_ms": 5000,
        "may_judge": False,  # judging has nothing to do with extracting
    }
    response = api.post("/api/v1/deployments", body)
    assert response.status_code == 201, response.content


def memory_route(api: ApiClient, extractor: str, name: str = "m") -> None:
    source = {"type": "memory", "name": "memories", "store": {"auto": True, "extractor": extractor}}
    route = {"name": name, "context": {"sources": [source]}}
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def turn_through(api: ApiClient, route: str = "m", user: str = "u1") -> str:
    """Resolve a turn, hand the answer back (the write runs then); the resolve id."""
    resolved = api.post(
        "/api/v1/resolve",
        {
            "route": route,
            "user": user,
            "request": {"messages": [{"role": "user", "content": USER_TEXT}]},
        },
    )
    assert resolved.status_code == 200, resolved.content
    resolve_id = str(resolved.json()["id"])
    answer = {"choices": [{"message": {"role": "assistant", "content": "Lyon is lovely."}}]}
    handed = api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": answer})
    assert handed.status_code == 202, handed.content
    assert handed.json()["memory_write"] == "queued"
    return resolve_id


def memories(api: ApiClient, user: str = "u1") -> list[str]:
    listed = api.get(f"/api/v1/users/{user}/memories", {"limit": 100}).json()["data"]
    return sorted(m["content"] for m in listed)


def turn_of(tenant: TenantFixture, resolve_id: str) -> MemoryTurn:
    with schema_context(tenant.schema):
        return MemoryTurn.objects.get(resolve_id=resolve_id)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_the_extractor_calls_the_tenants_deployment(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream, protocol: str
) -> None:
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        create_deployment(acme_api, upstream, protocol=protocol)
        memory_route(acme_api, "extractor-dep")
        resolve_id = turn_through(acme_api)

    assert memories(acme_api) == ["User loves jazz", "User moved to Lyon in May"]
    turn = turn_of(acme, resolve_id)
    assert (turn.status, turn.added) == ("written", 2)

    [seen] = upstream.requests  # one call for the turn
    body = seen.body
    assert body["model"] == f"{protocol}-extractor-model"
    prompt = json.dumps(body)
    assert "long-term memory" in prompt and "I love jazz" in prompt and "Lyon is lovely." in prompt
    if protocol == "openai":
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["authorization"] == f"Bearer {KEYS['openai']}"
        assert body["response_format"] == {"type": "json_object"}
    else:
        assert seen.path == ANTHROPIC_PATH
        assert seen.headers["x-api-key"] == KEYS["anthropic"]
        assert "anthropic-version" in seen.headers and "authorization" not in seen.headers
        assert "response_format" not in body and isinstance(body["max_tokens"], int)
        assert "long-term memory" in body["system"]
        assert [m["role"] for m in body["messages"]] == ["user"]


def test_the_outbound_guard_refuses_a_loopback_extractor_without_the_allow_list(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    with outbound_allowlist(acme.schema, ["10.0.0.0/8"]):  # not loopback
        create_deployment(acme_api, upstream)
        memory_route(acme_api, "extractor-dep")
        resolve_id = turn_through(acme_api)
    turn = turn_of(acme, resolve_id)
    assert turn.status == "failed"
    assert "extractor 'extractor-dep' refused by the outbound guard" in turn.error
    assert "loopback" in turn.error
    assert upstream.hits == 0  # refused before anything was sent
    assert memories(acme_api) == []


def test_the_tenants_deployment_wins_over_a_platform_one_of_the_same_name(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    with running_service() as platform:
        platform.responder = lambda seen: chat_reply(json.dumps({"decisions": []}))
        with (
            override_settings(
                LLM_DEPLOYMENTS={"extractor-dep": {"url": platform.base, "model": "p"}}
            ),
            outbound_allowlist(acme.schema, [LOOPBACK]),
        ):
            create_deployment(acme_api, upstream)
            memory_route(acme_api, "extractor-dep")
            turn_through(acme_api)
            # A platform deployment still extracts, called as before.
            memory_route(acme_api, "platform-only", name="p")
            with override_settings(
                LLM_DEPLOYMENTS={"platform-only": {"url": platform.base, "model": "p"}}
            ):
                turn_through(acme_api, route="p", user="u2")
        assert upstream.hits == 1
        assert platform.paths == ["/v1/chat/completions"]  # the platform-only route's turn
    assert memories(acme_api) == ["User loves jazz", "User moved to Lyon in May"]


def test_a_name_that_is_neither_is_refused_with_both_kinds_named(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    create_deployment(acme_api, upstream)
    with schema_context(acme.schema):
        assert LLMExtractor("extractor-dep").deployment.allowlist is not None  # guarded
        with pytest.raises(ExtractionError) as refused:
            LLMExtractor("nope")
    message = str(refused.value)
    assert "unknown extractor deployment 'nope' (known: extractor-dep)" in message
    assert "this tenant's deployments" in message and "LLM_DEPLOYMENTS" in message


def test_the_extractor_is_told_and_keeps_the_turns_date(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    """The LLM path dates its memories as the local one does: by the turn, not the write."""
    said = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        create_deployment(acme_api, upstream)
        memory_route(acme_api, "extractor-dep")
        resolved = acme_api.post(
            "/api/v1/resolve",
            {
                "route": "m",
                "user": "u1",
                "request": {"messages": [{"role": "user", "content": USER_TEXT}]},
            },
        ).json()
        with schema_context(acme.schema):
            MemoryTurn.objects.filter(resolve_id=resolved["id"]).update(created_at=said)
        answer = {"choices": [{"message": {"role": "assistant", "content": "Lyon is lovely."}}]}
        acme_api.post(f"/api/v1/resolve/{resolved['id']}/response", {"response": answer})

    [seen] = upstream.requests
    prompt = next(m["content"] for m in seen.body["messages"] if m["role"] == "user")
    assert json.loads(prompt.split("\n", 1)[1])["turn"]["date"] == "2025-03-14"
    listed = acme_api.get("/api/v1/users/u1/memories").json()["data"]
    assert sorted(m["content"] for m in listed) == ["User loves jazz", "User moved to Lyon in May"]
    assert {datetime.fromisoformat(m["observed_at"]) for m in listed} == {said}


def test_the_extractors_update_keeps_history_and_its_delete_forgets(
    acme_api: ApiClient, acme: TenantFixture, upstream: LoopbackUpstream
) -> None:
    """An update is a new memory superseding the old wording (listed with what replaced it,
    never searched); a delete, asked for by a user who wants something forgotten, deletes."""
    tea = acme_api.post(
        "/api/v1/users/u1/memories", {"content": "User likes tea", "kind": "preference"}
    ).json()
    car = acme_api.post("/api/v1/users/u1/memories", {"content": "User drives a Volvo"}).json()
    decisions = [
        {"action": "update", "content": "User likes green tea without sugar", "id": tea["id"]},
        {"action": "delete", "id": car["id"]},
    ]
    upstream.answer_with(lambda body: json.dumps({"decisions": decisions}))
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        create_deployment(acme_api, upstream)
        text = "I like green tea without sugar now. Please forget that I drive a Volvo."
        written = acme_api.post(
            "/api/v1/users/u1/memories",
            {"messages": [{"role": "user", "content": text}], "extractor": "extractor-dep"},
        )
    assert written.status_code == 201, written.content
    body = written.json()
    assert (body["added"], body["updated"], body["deleted"]) == (0, 1, 1)
    [new] = body["data"]
    assert new["id"] != tea["id"] and new["kind"] == "preference"
    listed = {m["id"]: m for m in acme_api.get("/api/v1/users/u1/memories").json()["data"]}
    assert set(listed) == {tea["id"], new["id"]}  # the car is gone, the old tea kept
    assert listed[tea["id"]]["superseded_by"] == new["id"]
    assert listed[new["id"]]["superseded_by"] is None
    found = acme_api.post("/api/v1/users/u1/memories/search", {"query": "tea"}).json()["data"]
    assert [hit["content"] for hit in found] == ["User likes green tea without sugar"]
