"""Tenant isolation: one tenant's key never reads, changes or resolves another tenant's data.

Every case runs both ways (data in globex probed from acme, and the reverse).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.deployments.models import Deployment
from contextplatform.gateway.budgets import Ask, reserve, settle
from contextplatform.gateway.models import SessionSpend
from contextplatform.gateway.protocol import GatewayError
from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Route
from sources.models import ChatMessage, UserProfile
from tests.conftest import ApiClient, TenantFixture

SECRET = "owner-only-guardrail"


def route_body(name: str, text: str, **context: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} route",
        "context": {
            "sources": [
                {"type": "skill_guardrails", "texts": [text]},
                {"type": "user_profile"},
                {"type": "recent_messages", "last_n_turns": 10},
            ],
            "injection": {"mode": "system_prompt"},
            **context,
        },
    }


def chat(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture(params=["globex_to_acme", "acme_to_globex"])
def pair(
    request: pytest.FixtureRequest,
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
) -> tuple[ApiClient, TenantFixture, ApiClient, TenantFixture]:
    """(owner client, owner tenant, intruder client, intruder tenant)."""
    if request.param == "globex_to_acme":
        return globex_api, globex, acme_api, acme
    return acme_api, acme, globex_api, globex


Pair = tuple[ApiClient, TenantFixture, ApiClient, TenantFixture]


# --- routes ---------------------------------------------------------------------------------


def test_routes_are_invisible_and_untouchable_across_tenants(pair: Pair) -> None:
    owner, owner_tenant, intruder, _ = pair
    assert owner.post("/api/v1/routes", route_body("private", SECRET)).status_code == 201

    listed = intruder.get("/api/v1/routes")
    assert listed.status_code == 200
    assert "private" not in [r["name"] for r in listed.json()["data"]]
    assert SECRET not in listed.content.decode()

    assert intruder.get("/api/v1/routes/private").status_code == 404
    put = intruder.put(
        "/api/v1/routes/private", {"description": "hijacked", "context": {"sources": []}}
    )
    assert put.status_code == 404
    patch = intruder.patch("/api/v1/routes/private", {"description": "hijacked"})
    assert patch.status_code == 404
    assert intruder.delete("/api/v1/routes/private").status_code == 404

    # The owner's route is untouched, both through the API and in its schema.
    own = owner.get("/api/v1/routes/private")
    assert own.status_code == 200
    assert own.json()["description"] == "private route"
    assert own.json()["context"]["sources"][0]["texts"] == [SECRET]
    with schema_context(owner_tenant.schema):
        assert Route.objects.get(name="private").description == "private route"


def test_intruder_creating_same_name_does_not_touch_owner(pair: Pair) -> None:
    owner, owner_tenant, intruder, intruder_tenant = pair
    assert owner.post("/api/v1/routes", route_body("shared", SECRET)).status_code == 201
    # The name is free in the other tenant: no 409 that would leak the owner's route.
    assert intruder.post("/api/v1/routes", route_body("shared", "intruder text")).status_code == 201
    assert intruder.delete("/api/v1/routes/shared").status_code == 204
    with schema_context(owner_tenant.schema):
        assert Route.objects.filter(name="shared").count() == 1
    with schema_context(intruder_tenant.schema):
        assert not Route.objects.filter(name="shared").exists()
    assert owner.get("/api/v1/routes/shared").json()["context"]["sources"][0]["texts"] == [SECRET]


def test_same_route_name_resolves_each_tenants_own_config(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    assert acme_api.post("/api/v1/routes", route_body("support", "ACME-RULE")).status_code == 201
    assert (
        globex_api.post("/api/v1/routes", route_body("support", "GLOBEX-RULE")).status_code == 201
    )

    for api, own, other in (
        (acme_api, "ACME-RULE", "GLOBEX-RULE"),
        (globex_api, "GLOBEX-RULE", "ACME-RULE"),
    ):
        response = api.post("/api/v1/resolve", {"route": "support", "request": chat()})
        assert response.status_code == 200, response.content
        system = response.json()["request"]["messages"][0]
        assert system["role"] == "system"
        assert own in system["content"]
        assert other not in json.dumps(response.json())


def test_resolve_cannot_use_other_tenants_route(pair: Pair) -> None:
    owner, _, intruder, _ = pair
    assert owner.post("/api/v1/routes", route_body("private", SECRET)).status_code == 201
    response = intruder.post("/api/v1/resolve", {"route": "private", "request": chat()})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert response.json()["error"]["param"] == "route"
    assert SECRET not in response.content.decode()


def test_host_header_of_other_tenant_does_not_override_key(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    assert globex_api.post("/api/v1/routes", route_body("globex-only", SECRET)).status_code == 201
    # acme's key on globex's host still means acme.
    response = acme_api.client.get(
        "/api/v1/routes/globex-only",
        headers={"Authorization": f"Bearer {acme_api.key}"},
        HTTP_HOST="globex.localhost",
    )
    assert response.status_code == 404
    listed = acme_api.client.get(
        "/api/v1/routes", headers={"X-Api-Key": acme_api.key or ""}, HTTP_HOST="globex.localhost"
    )
    assert listed.status_code == 200
    assert "globex-only" not in [r["name"] for r in listed.json()["data"]]


# --- deployments ----------------------------------------------------------------------------


def deployment_body(name: str, model: str) -> dict[str, Any]:
    return {
        "name": name,
        "protocol": "openai",
        "base_url": "https://models.example.com/v1",
        "model": model,
        "api_key": "sk-owner-only-key",
    }


def test_deployments_are_invisible_and_untouchable_across_tenants(pair: Pair) -> None:
    owner, owner_tenant, intruder, intruder_tenant = pair
    created = owner.post("/api/v1/deployments", deployment_body("private", SECRET))
    assert created.status_code == 201, created.content

    listed = intruder.get("/api/v1/deployments")
    assert listed.status_code == 200
    assert listed.json()["data"] == []
    assert intruder.get("/api/v1/deployments/private").status_code == 404
    put = intruder.put("/api/v1/deployments/private", deployment_body("private", "hijacked"))
    assert put.status_code == 404
    assert intruder.patch("/api/v1/deployments/private", {"model": "hijacked"}).status_code == 404
    assert intruder.delete("/api/v1/deployments/private").status_code == 404

    # The same name is free in the other tenant, and a route there cannot name the owner's.
    route = {"name": "mine", "model": {"upstream": "private"}}
    refused = intruder.post("/api/v1/routes", route)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "model.upstream"
    assert (
        intruder.post("/api/v1/deployments", deployment_body("private", "theirs")).status_code
        == 201
    )
    assert intruder.delete("/api/v1/deployments/private").status_code == 204

    own = owner.get("/api/v1/deployments/private")
    assert own.status_code == 200
    assert own.json()["model"] == SECRET
    assert own.json()["api_key_set"] is True
    with schema_context(owner_tenant.schema):
        assert Deployment.objects.get(name="private").model == SECRET
    with schema_context(intruder_tenant.schema):
        assert not Deployment.objects.filter(name="private").exists()


# --- user profiles --------------------------------------------------------------------------


def test_profiles_are_isolated(pair: Pair) -> None:
    owner, owner_tenant, intruder, intruder_tenant = pair
    put = owner.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "gold", "secret": SECRET}})
    assert put.status_code == 200

    response = intruder.get("/api/v1/users/u_1/profile")
    assert response.status_code == 404
    assert SECRET not in response.content.decode()

    # The intruder writing the same user id writes its own profile, not the owner's.
    assert (
        intruder.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "free"}}).status_code
        == 200
    )
    assert owner.get("/api/v1/users/u_1/profile").json()["attributes"] == {
        "plan": "gold",
        "secret": SECRET,
    }
    assert intruder.get("/api/v1/users/u_1/profile").json()["attributes"] == {"plan": "free"}
    with schema_context(owner_tenant.schema):
        assert UserProfile.objects.get(user_id="u_1").attributes["plan"] == "gold"
    with schema_context(intruder_tenant.schema):
        assert UserProfile.objects.get(user_id="u_1").attributes == {"plan": "free"}


def test_resolve_never_injects_other_tenants_profile(pair: Pair) -> None:
    owner, _, intruder, _ = pair
    assert (
        owner.put("/api/v1/users/u_1/profile", {"attributes": {"secret": SECRET}}).status_code
        == 200
    )
    assert intruder.post("/api/v1/routes", route_body("mine", "intruder rule")).status_code == 201

    response = intruder.post("/api/v1/resolve", {"route": "mine", "user": "u_1", "request": chat()})
    assert response.status_code == 200, response.content
    body = response.json()
    assert SECRET not in json.dumps(body)
    profile = next(s for s in body["sources"] if s["name"] == "user_profile")
    assert profile["status"] == "empty"


# --- session messages -----------------------------------------------------------------------


def test_session_messages_are_isolated(pair: Pair) -> None:
    owner, owner_tenant, intruder, _ = pair
    posted = owner.post(
        "/api/v1/sessions/s_1/messages",
        {"user": "u_1", "messages": [{"role": "user", "content": SECRET}]},
    )
    assert posted.status_code == 201

    for params in ({"user": "u_1"}, {}):
        response = intruder.get("/api/v1/sessions/s_1/messages", params)
        assert response.status_code == 200
        assert response.json()["data"] == []
        assert SECRET not in response.content.decode()

    # Appending from the other tenant lands in its own schema only.
    appended = intruder.post(
        "/api/v1/sessions/s_1/messages",
        {"user": "u_1", "messages": [{"role": "user", "content": "intruder"}]},
    )
    assert appended.status_code == 201
    assert appended.json()["data"][0]["seq"] == 1
    own = owner.get("/api/v1/sessions/s_1/messages", {"user": "u_1"}).json()["data"]
    assert [m["content"] for m in own] == [SECRET]
    with schema_context(owner_tenant.schema):
        assert list(ChatMessage.objects.values_list("text", flat=True)) == [SECRET]


def test_resolve_never_injects_other_tenants_session(pair: Pair) -> None:
    owner, _, intruder, _ = pair
    owner.post(
        "/api/v1/sessions/s_1/messages",
        {
            "user": "u_1",
            "messages": [
                {"role": "user", "content": SECRET},
                {"role": "assistant", "content": "ok"},
            ],
        },
    )
    assert intruder.post("/api/v1/routes", route_body("mine", "intruder rule")).status_code == 201
    response = intruder.post(
        "/api/v1/resolve",
        {"route": "mine", "user": "u_1", "session": "s_1", "request": chat("next")},
    )
    assert response.status_code == 200, response.content
    assert SECRET not in json.dumps(response.json())
    recent = next(s for s in response.json()["sources"] if s["name"] == "recent_messages")
    assert recent["status"] == "empty"


def test_session_budgets_are_isolated(pair: Pair) -> None:
    _, owner_tenant, _, intruder_tenant = pair
    call = Ask(key=("s_1", "u_1"), limit=100, input_tokens=60, output_wanted=40)
    with schema_context(owner_tenant.schema):
        settle(reserve(call), 100)
        with pytest.raises(GatewayError):  # the owner's session has spent its budget
            reserve(call)

    # The same session and user in the other tenant have a budget of their own, untouched.
    with schema_context(intruder_tenant.schema):
        assert reserve(call).tokens == 100
        assert list(SessionSpend.objects.values_list("spent", "reserved")) == [(0, 100)]
    with schema_context(owner_tenant.schema):
        assert list(SessionSpend.objects.values_list("spent", "reserved")) == [(100, 0)]


# --- replay and hand-back -------------------------------------------------------------------


def resolve_in(api: ApiClient, route: str = "private", **extra: Any) -> dict[str, Any]:
    response = api.post("/api/v1/resolve", {"route": route, "request": chat(), **extra})
    assert response.status_code == 200, response.content
    return response.json()


def test_replay_records_are_isolated(pair: Pair) -> None:
    owner, owner_tenant, intruder, _ = pair
    assert owner.post("/api/v1/routes", route_body("private", SECRET)).status_code == 201
    record_id = resolve_in(owner, user="u_1")["id"]

    listed = intruder.get("/api/v1/replay")
    assert listed.status_code == 200
    assert record_id not in [r["id"] for r in listed.json()["data"]]
    for params in ({"route": "private"}, {"user": "u_1"}, {"status": "ok"}):
        assert intruder.get("/api/v1/replay", params).json()["data"] == []

    detail = intruder.get(f"/api/v1/replay/{record_id}")
    assert detail.status_code == 404
    assert detail.json()["error"]["code"] == "not_found"

    # A cursor minted by the owner does not open the owner's records either.
    for _ in range(2):
        resolve_in(owner)
    cursor = owner.get("/api/v1/replay", {"limit": 1}).json()["next_cursor"]
    assert cursor
    assert intruder.get("/api/v1/replay", {"cursor": cursor}).json()["data"] == []

    assert owner.get(f"/api/v1/replay/{record_id}").status_code == 200
    with schema_context(owner_tenant.schema):
        assert ReplayRecord.objects.filter(pk=record_id).exists()


def test_hand_back_cannot_complete_other_tenants_resolve(pair: Pair) -> None:
    owner, owner_tenant, intruder, _ = pair
    assert owner.post("/api/v1/routes", route_body("private", SECRET)).status_code == 201
    record_id = resolve_in(owner, user="u_1", session="s_1")["id"]
    answer = {"choices": [{"message": {"role": "assistant", "content": "INTRUDER ANSWER"}}]}

    response = intruder.post(f"/api/v1/resolve/{record_id}/response", {"response": answer})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"

    # Nothing was written to the owner's session and the record is still open.
    messages = owner.get("/api/v1/sessions/s_1/messages", {"user": "u_1"}).json()["data"]
    assert [m["role"] for m in messages] == ["user"]
    with schema_context(owner_tenant.schema):
        assert ReplayRecord.objects.get(pk=record_id).response_received_at is None

    # The owner can still hand its own answer back.
    own = {"choices": [{"message": {"role": "assistant", "content": "owner answer"}}]}
    accepted = owner.post(f"/api/v1/resolve/{record_id}/response", {"response": own})
    assert accepted.status_code == 202
    assert accepted.json()["duplicate"] is False
    messages = owner.get("/api/v1/sessions/s_1/messages", {"user": "u_1"}).json()["data"]
    assert [m["content"] for m in messages] == ["hello", "owner answer"]
