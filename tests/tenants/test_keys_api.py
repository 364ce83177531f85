"""A tenant's own keys through ``/api/v1/keys``: the plain key shown once, scopes never beyond the
creator's, revocation, expiry and rotation refused everywhere at once, validation, and no tenant
ever reaching another's keys."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from tenants.models import ApiKey, KeySpend, period_start
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture

CHAT = {"model": "support", "messages": [{"role": "user", "content": "hi"}]}

BODY: dict[str, Any] = {
    "name": "web-app",
    "scopes": ["resolve", "routes.read"],
    "expires_at": None,
    "rate_limit": {"rpm": 600, "tpm": 200000},
    "budget": {"max_usd": 50.0, "max_tokens": None, "period": "day"},
    "metadata": {"team": "web", "tags": ["a", "b"]},
}


def created(api: ApiClient, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = api.post("/api/v1/keys", body or BODY)
    assert response.status_code == 201, response.content
    answer: dict[str, Any] = response.json()
    return answer


def test_create_shows_the_key_once_and_it_works(acme_api: ApiClient) -> None:
    answer = created(acme_api)
    assert answer["id"].startswith("key_")
    assert answer["key"].startswith("cp_")
    assert answer["spent"] == {"usd": 0.0, "tokens": 0}
    for field in ("name", "scopes", "expires_at", "rate_limit", "budget", "metadata"):
        assert answer[field] == BODY[field], field
    assert answer["status"] == "active"
    assert answer["key"].startswith(answer["prefix"])

    read = acme_api.get(f"/api/v1/keys/{answer['id']}").json()
    assert "key" not in read
    listed = acme_api.get("/api/v1/keys").json()["data"]
    assert answer["id"] in [k["id"] for k in listed]
    assert all("key" not in k and "key_hash" not in k for k in listed)

    new = ApiClient(answer["key"])
    assert new.get("/api/v1/routes").status_code == 200
    # Its scopes only: no keys.manage, no routes.write.
    assert new.get("/api/v1/keys").status_code == 403
    assert new.post("/api/v1/routes", {"name": "x", "context": {}}).status_code == 403


def test_a_read_posts_back(acme_api: ApiClient) -> None:
    read = acme_api.get(f"/api/v1/keys/{created(acme_api)['id']}").json()
    again = acme_api.post("/api/v1/keys", read)
    assert again.status_code == 201, again.content


def test_a_key_never_grants_a_scope_its_creator_lacks(acme: TenantFixture) -> None:
    narrow = issue_api_key(tenant=acme.tenant, scopes=["keys.manage", "resolve"], name="narrow")
    api = ApiClient(narrow.plain_key)
    response = api.post("/api/v1/keys", {"name": "x", "scopes": ["resolve", "routes.write"]})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden" and "routes.write" in error["message"]
    assert api.post("/api/v1/keys", {"name": "x", "scopes": ["resolve"]}).status_code == 201
    own = created(ApiClient(acme.key), {"name": "y", "scopes": ["resolve"]})
    patched = api.patch(f"/api/v1/keys/{own['id']}", {"scopes": ["resolve", "memory.write"]})
    assert patched.status_code == 403 and "memory.write" in patched.json()["error"]["message"]


def test_bad_bodies_are_400_naming_the_field(acme_api: ApiClient) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"scopes": ["resolve"]}, "name"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": ["root"]}, "scopes"),
        ({"name": "x", "scopes": ["resolve"], "rate_limit": {"rpm": 0}}, "rate_limit.rpm"),
        ({"name": "x", "scopes": ["resolve"], "rate_limit": {"rpm": "6"}}, "rate_limit.rpm"),
        ({"name": "x", "scopes": ["resolve"], "budget": {"max_usd": -1}}, "budget.max_usd"),
        ({"name": "x", "scopes": ["resolve"], "budget": {"period": "week"}}, "budget.period"),
        ({"name": "x", "scopes": ["resolve"], "expires_at": "soon"}, "expires_at"),
        ({"name": "x", "scopes": ["resolve"], "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        (
            {"name": "x", "scopes": ["resolve"], "metadata": {"a": {"b": {"c": {"d": {}}}}}},
            "metadata",
        ),
        ({"name": "x", "scopes": ["resolve"], "metadata": {"a": "x" * 5000}}, "metadata"),
        ({"name": "x", "scopes": ["resolve"], "owner": "me"}, "owner"),
    ]
    for body, param in cases:
        response = acme_api.post("/api/v1/keys", body)
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["param"] == param, (body, response.json())


def test_patch_changes_limits_and_keeps_the_rest(acme_api: ApiClient) -> None:
    key = created(acme_api)
    response = acme_api.patch(
        f"/api/v1/keys/{key['id']}",
        {"budget": {"max_tokens": 1000, "max_usd": None}, "metadata": {"tags": None}},
    )
    assert response.status_code == 200, response.content
    patched = response.json()
    assert patched["budget"] == {"max_usd": None, "max_tokens": 1000, "period": "day"}
    assert patched["metadata"] == {"team": "web"}
    assert patched["rate_limit"] == BODY["rate_limit"]
    assert acme_api.patch(f"/api/v1/keys/{key['id']}", {"name": ""}).status_code == 400


def test_revoked_and_expired_keys_are_401_on_rest_and_gateway(acme: TenantFixture) -> None:
    api = ApiClient(acme.key)
    key = created(api)
    revoked = ApiClient(key["key"])
    assert revoked.get("/api/v1/routes").status_code == 200  # now kept by this process
    gone = api.delete(f"/api/v1/keys/{key['id']}")
    assert gone.status_code == 200 and gone.json()["status"] == "revoked"
    assert revoked.get("/api/v1/routes").status_code == 401
    gateway = revoked.post("/v1/chat/completions", CHAT)
    assert gateway.status_code == 401 and "type" in gateway.json()["error"]  # OpenAI shape
    connection.set_schema_to_public()
    assert ApiKey.objects.get(pk=int(key["id"][4:])).revoked_at is not None  # the row stays
    assert key["id"] in [k["id"] for k in api.get("/api/v1/keys").json()["data"]]

    # An expiry is not a change anyone saves: the copy this process keeps is refused once its
    # time has come, with nothing dropped.
    expires_at = timezone.now() + timedelta(seconds=2)
    expiring = created(api, {**BODY, "expires_at": expires_at.isoformat()})
    client = ApiClient(expiring["key"])
    assert client.get("/api/v1/routes").status_code == 200  # kept by this process now
    time.sleep(max((expires_at - timezone.now()).total_seconds(), 0) + 0.1)
    assert client.get("/api/v1/routes").status_code == 401
    assert client.post("/v1/messages", {**CHAT, "max_tokens": 8}).status_code == 401
    assert api.get(f"/api/v1/keys/{expiring['id']}").json()["status"] == "expired"


def test_rotate_issues_a_new_key_and_revokes_the_old_at_once(acme: TenantFixture) -> None:
    api = ApiClient(acme.key)
    old = created(api)
    connection.set_schema_to_public()
    KeySpend.objects.create(
        key_id=int(old["id"][4:]),
        period_start=period_start("day"),
        spent_tokens=70,
        reserved_tokens=5,
        spent_usd=1,
        reserved_usd=0,
    )
    response = api.post(f"/api/v1/keys/{old['id']}/rotate")
    assert response.status_code == 201, response.content
    new = response.json()
    assert new["id"] != old["id"] and new["key"] != old["key"]
    for field in ("name", "scopes", "expires_at", "rate_limit", "budget", "metadata"):
        assert new[field] == old[field], field
    # Rotating never refills a budget: the old key's spend (its calls in flight too) carries on.
    assert new["spent"] == {"usd": 1.0, "tokens": 75}
    assert ApiClient(old["key"]).get("/api/v1/routes").status_code == 401
    assert ApiClient(new["key"]).get("/api/v1/routes").status_code == 200
    assert api.post(f"/api/v1/keys/{old['id']}/rotate").status_code == 409


def test_no_tenant_reaches_another_tenants_keys(
    acme: TenantFixture, acme_api: ApiClient, globex_api: ApiClient
) -> None:
    theirs = created(globex_api, {**BODY, "name": "globex-secret-key"})
    ours = created(acme_api)
    listed = acme_api.get("/api/v1/keys").json()["data"]
    assert theirs["id"] not in [k["id"] for k in listed]
    assert "globex-secret-key" not in str(listed)
    assert all(k["id"] != "" for k in listed)
    key_id = theirs["id"]
    for method, path, body in (
        ("GET", f"/api/v1/keys/{key_id}", None),
        ("PATCH", f"/api/v1/keys/{key_id}", {"name": "hijacked", "scopes": ["resolve"]}),
        ("DELETE", f"/api/v1/keys/{key_id}", None),
        ("POST", f"/api/v1/keys/{key_id}/rotate", None),
    ):
        response = acme_api.send(method, path, body)
        assert response.status_code == 404, (method, response.content)
        assert response.json()["error"]["code"] == "not_found"
        assert "globex" not in response.content.decode()
    connection.set_schema_to_public()
    row = ApiKey.objects.get(pk=int(key_id[4:]))
    assert row.name == "globex-secret-key" and row.revoked_at is None
    assert (
        ApiKey.objects.filter(tenant__schema_name="globex", name="globex-secret-key").count() == 1
    )
    assert ApiClient(theirs["key"]).get("/api/v1/routes").status_code == 200
    for bad in ("key_x", "42", "key_99999999", "key_" + "9" * 30):
        assert acme_api.get(f"/api/v1/keys/{bad}").status_code == 404
    assert acme_api.get(f"/api/v1/keys/{ours['id']}").status_code == 200
