"""API keys: hashed at rest, both headers, revocation, the management commands, the tenant admin."""

from __future__ import annotations

import hashlib
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from tenants.models import ApiKey, Domain, Tenant
from tenants.scopes import ALL_SCOPES
from tenants.services import issue_api_key, revoke_api_key
from tests.conftest import ApiClient, TenantFixture

ROUTE = {
    "name": "support",
    "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be kind."]}]},
}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def printed_key(output: str) -> str:
    """The key a command printed: the line after 'shown once'."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    marker = next(i for i, line in enumerate(lines) if "shown once" in line)
    return lines[marker + 1]


# --- storage --------------------------------------------------------------------------------


def test_keys_are_stored_hashed(acme: TenantFixture) -> None:
    issued = issue_api_key(tenant=acme.tenant, name="hashed")
    plain = issued.plain_key
    stored = ApiKey.objects.get(pk=issued.api_key.pk)
    assert stored.key_hash == hashlib.sha256(plain.encode()).hexdigest()
    assert stored.key_hash != plain
    assert len(stored.prefix) < len(plain) // 2
    assert plain.startswith(stored.prefix)

    # The plain key (and the tenants' fixture keys) appear in no column of any ApiKey row.
    for key in (plain, acme.key):
        secret_tail = key[len(stored.prefix) :]
        for row in ApiKey.objects.values():
            for value in row.values():
                assert key not in str(value)
                assert secret_tail not in str(value)


def test_each_key_is_unique_and_random(acme: TenantFixture) -> None:
    keys = {issue_api_key(tenant=acme.tenant, name=f"k{i}").plain_key for i in range(5)}
    assert len(keys) == 5
    assert all(len(key) >= 40 for key in keys)


# --- presenting a key -----------------------------------------------------------------------


def test_bearer_and_x_api_key_both_select_the_tenant(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    assert acme_api.post("/api/v1/routes", ROUTE).status_code == 201
    anonymous = ApiClient(None)
    for headers in (
        {"Authorization": f"Bearer {acme.key}"},
        {"Authorization": f"bearer {acme.key}"},
        {"X-Api-Key": acme.key},
    ):
        response = anonymous.get("/api/v1/routes/support", headers=headers)
        assert response.status_code == 200, (headers, response.content)
        assert response.json()["name"] == "support"


def test_wrong_scheme_is_not_a_key(acme: TenantFixture) -> None:
    response = ApiClient(None).get("/api/v1/routes", headers={"Authorization": f"Basic {acme.key}"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_revoked_key_is_refused_and_others_keep_working(acme: TenantFixture) -> None:
    first = issue_api_key(tenant=acme.tenant, name="first")
    second = issue_api_key(tenant=acme.tenant, name="second")
    for issued in (first, second):
        assert ApiClient(issued.plain_key).get("/api/v1/routes").status_code == 200
    revoke_api_key(api_key=first.api_key)
    for headers in ({"Authorization": f"Bearer {first.plain_key}"}, {"X-Api-Key": first.plain_key}):
        response = ApiClient(None).get("/api/v1/routes", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
    assert ApiClient(second.plain_key).get("/api/v1/routes").status_code == 200


def test_use_marks_last_used(acme: TenantFixture) -> None:
    issued = issue_api_key(tenant=acme.tenant, name="touched")
    assert issued.api_key.last_used_at is None
    ApiClient(issued.plain_key).get("/api/v1/routes")
    connection.set_schema_to_public()
    assert ApiKey.objects.get(pk=issued.api_key.pk).last_used_at is not None


# --- management commands --------------------------------------------------------------------


def test_create_tenant_prints_a_working_key_with_all_scopes(new_tenant_name: str) -> None:
    out = StringIO()
    call_command("create_tenant", new_tenant_name, stdout=out)
    output = out.getvalue()
    key = printed_key(output)
    assert key.startswith("cp_")

    connection.set_schema_to_public()
    tenant = Tenant.objects.get(schema_name=new_tenant_name)
    assert Domain.objects.filter(tenant=tenant, domain=f"{new_tenant_name}.localhost").exists()
    stored = ApiKey.objects.get(tenant=tenant)
    assert stored.scopes == list(ALL_SCOPES)
    assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()

    api = ApiClient(key)
    assert api.get("/api/v1/routes").json()["data"] == []
    assert api.post("/api/v1/routes", ROUTE).status_code == 201
    resolved = api.post("/api/v1/resolve", {"route": "support", "request": CHAT})
    assert resolved.status_code == 200, resolved.content
    assert api.get(f"/api/v1/replay/{resolved.json()['id']}").status_code == 200
    assert api.put("/api/v1/users/u/profile", {"attributes": {"a": 1}}).status_code == 200
    assert api.get("/api/v1/users/u/profile").status_code == 200

    # The new tenant's route lives in its own schema, not in acme's.
    with schema_context("acme"):
        from contextplatform.routes.models import Route

        assert not Route.objects.filter(name="support").exists()


def test_create_tenant_refuses_bad_and_duplicate_names(new_tenant_name: str) -> None:
    with pytest.raises(CommandError):
        call_command("create_tenant", "Bad Name!", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("create_tenant", "public", stdout=StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_tenant", "acme", stdout=StringIO())


def test_create_api_key_with_narrow_scopes(acme: TenantFixture, acme_api: ApiClient) -> None:
    assert (
        acme_api.put("/api/v1/users/u1/profile", {"attributes": {"tier": "gold"}}).status_code
        == 200
    )
    out = StringIO()
    call_command("create_api_key", "acme", "--scopes", "resolve,memory.read", stdout=out)
    key = printed_key(out.getvalue())

    connection.set_schema_to_public()
    stored = ApiKey.objects.get(key_hash=hashlib.sha256(key.encode()).hexdigest())
    assert stored.tenant.schema_name == "acme"
    assert sorted(stored.scopes) == ["memory.read", "resolve"]

    narrow = ApiClient(key)
    assert narrow.get("/api/v1/users/u1/profile").json()["attributes"] == {"tier": "gold"}
    for method, path, body in (
        ("GET", "/api/v1/routes", None),
        ("PUT", "/api/v1/users/u1/profile", {"attributes": {}}),
        ("GET", "/api/v1/replay", None),
    ):
        response = narrow.send(method, path, body)
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["code"] == "forbidden"


def test_create_api_key_refuses_unknown_scope(acme: TenantFixture) -> None:
    before = ApiKey.objects.count()
    out = StringIO()
    with pytest.raises(CommandError, match=r"admin\.everything"):
        call_command("create_api_key", "acme", "--scopes", "resolve,admin.everything", stdout=out)
    assert "cp_" not in out.getvalue()
    connection.set_schema_to_public()
    assert ApiKey.objects.count() == before


def test_create_api_key_unknown_tenant(db: Any) -> None:
    with pytest.raises(CommandError, match="no tenant"):
        call_command("create_api_key", "nobody_here", stdout=StringIO())


# --- the tenant's own admin site ------------------------------------------------------------


def make_superuser(schema: str, username: str, password: str) -> None:
    with schema_context(schema):
        get_user_model().objects.create_superuser(username=username, email="", password=password)
    connection.set_schema_to_public()


def admin_login(client: Client, host: str, username: str, password: str) -> Any:
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        HTTP_HOST=host,
    )


def test_admin_works_on_the_tenants_own_host(acme: TenantFixture, globex: TenantFixture) -> None:
    make_superuser(acme.schema, "acme_op", "s3cret-pass-word")
    client = Client()

    assert client.get("/admin/", HTTP_HOST="acme.localhost").status_code == 302  # to the login page
    login = admin_login(client, "acme.localhost", "acme_op", "s3cret-pass-word")
    assert login.status_code == 302, login.content
    assert login["Location"] == "/admin/"

    index = client.get("/admin/", HTTP_HOST="acme.localhost")
    assert index.status_code == 200
    page = index.content.decode()
    assert "acme_op" in page
    # Platform models (tenants, keys) are not managed from a tenant's admin.
    assert "/admin/tenants/apikey/" not in page
    assert "/admin/tenants/tenant/" not in page

    # acme's session means nothing on globex's host.
    other = client.get("/admin/", HTTP_HOST="globex.localhost")
    assert other.status_code == 302
    assert "/admin/login/" in other["Location"]


def test_tenant_user_cannot_log_in_on_other_tenants_host(
    acme: TenantFixture, globex: TenantFixture
) -> None:
    make_superuser(acme.schema, "acme_only", "s3cret-pass-word")
    client = Client()
    refused = admin_login(client, "globex.localhost", "acme_only", "s3cret-pass-word")
    assert refused.status_code == 200  # the form again, with an error
    # The password is right, on acme's admin: the refusal says so rather than "wrong password".
    assert "belongs to another host&#x27;s admin" in refused.content.decode()
    assert "sign in on acme.localhost" in refused.content.decode()
    assert client.get("/admin/", HTTP_HOST="globex.localhost").status_code == 302
    with schema_context(globex.schema):
        assert not get_user_model().objects.filter(username="acme_only").exists()
    # The same credentials work on acme's own host.
    assert (
        admin_login(Client(), "acme.localhost", "acme_only", "s3cret-pass-word").status_code == 302
    )
