"""The tenant admin's keys page, on the tenant's own host, signed in as its administrator: the
list shows the tenant's keys only (with spend against budget and status), a created key is shown
once on the page, limits, budget, metadata and scopes are edited through the API's schema, and
the actions rotate and revoke; the platform host has no such page."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from tenants.models import ApiKey, KeySpend, TenantApiKey, period_start
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture, admin_object_url

ACME_HOST = "acme.localhost"
LIST = "/admin/tenants/tenantapikey/"


def tenant_admin(schema: str, host: str) -> Client:
    client = Client(HTTP_HOST=host)
    with schema_context(schema):
        user = get_user_model().objects.create_superuser(f"admin-{uuid.uuid4().hex[:6]}", "", "x")
        client.force_login(user)
    connection.set_schema_to_public()
    return client


def shown(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def form(**fields: Any) -> dict[str, Any]:
    base = {
        "name": "admin-made",
        "scopes": ["resolve", "routes.read"],
        "expires_at_0": "",
        "expires_at_1": "",
        "rate_limit_rpm": "",
        "rate_limit_tpm": "",
        "budget_max_usd": "",
        "budget_max_tokens": "",
        "budget_period": "month",
        "metadata": "{}",
    }
    return {**base, **fields}


def test_the_list_shows_the_tenants_keys_only(acme: TenantFixture, globex: TenantFixture) -> None:
    ours = issue_api_key(tenant=acme.tenant, scopes=["resolve"], name="acme-listed").api_key
    ours.budget_max_tokens, ours.budget_period = 1000, "day"
    ours.save()
    KeySpend.objects.create(key=ours, period_start=period_start("day"), spent_tokens=250)
    issue_api_key(tenant=globex.tenant, name="globex-hidden")
    client = tenant_admin(acme.schema, ACME_HOST)
    response = client.get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "acme-listed" in page and ours.prefix in page
    assert "250 / 1000 tokens (day)" in page
    assert "active" in page
    assert "globex-hidden" not in page
    globex_key = ApiKey.objects.get(name="globex-hidden")
    other = client.get(admin_object_url(TenantApiKey, globex_key.pk))
    assert other.status_code in (302, 404)  # the admin's "does not exist" for a key not ours
    assert "globex-hidden" not in other.content.decode()


def test_create_shows_the_key_once_and_it_works(acme: TenantFixture) -> None:
    client = tenant_admin(acme.schema, ACME_HOST)
    assert client.get(f"{LIST}add/").status_code == 200
    response = client.post(
        f"{LIST}add/",
        form(budget_max_usd="12.5", rate_limit_rpm="60", metadata='{"team": "web"}'),
        follow=True,
    )
    assert response.status_code == 200
    plain = next(m for m in shown(response) if "shown once" in m).split(": ")[-1]
    assert plain.startswith("cp_")
    connection.set_schema_to_public()
    made = ApiKey.objects.get(tenant=acme.tenant, name="admin-made")
    assert made.scopes == ["resolve", "routes.read"]
    assert float(made.budget_max_usd or 0) == 12.5 and made.rate_limit_rpm == 60
    assert made.metadata == {"team": "web"}
    assert ApiClient(plain).get("/api/v1/routes").status_code == 200
    assert plain not in client.get(LIST).content.decode()  # once only


def test_bad_input_is_said_next_to_the_field(acme: TenantFixture) -> None:
    client = tenant_admin(acme.schema, ACME_HOST)
    response = client.post(f"{LIST}add/", form(metadata='{"a": {"b": {"c": {"d": {"e": 1}}}}}'))
    assert response.status_code == 200  # the form again, with its errors
    assert "nested deeper than 4 levels" in response.content.decode()
    response = client.post(f"{LIST}add/", form(expires_at_0="2001-01-01", expires_at_1="00:00"))
    assert "must be in the future" in response.content.decode()
    connection.set_schema_to_public()
    assert not ApiKey.objects.filter(name="admin-made").exists()


def test_edit_rotate_and_revoke(acme: TenantFixture) -> None:
    issued = issue_api_key(tenant=acme.tenant, scopes=["resolve"], name="edited")
    client = tenant_admin(acme.schema, ACME_HOST)
    url = admin_object_url(TenantApiKey, issued.api_key.pk)
    assert client.get(url).status_code == 200
    response = client.post(
        url,
        form(
            name="edited",
            scopes=["resolve", "memory.read"],
            budget_max_tokens="5000",
            budget_period="total",
            rate_limit_tpm="9000",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    connection.set_schema_to_public()
    edited = ApiKey.objects.get(pk=issued.api_key.pk)
    assert set(edited.scopes) == {"resolve", "memory.read"}
    assert edited.budget_max_tokens == 5000 and edited.budget_period == "total"
    assert edited.rate_limit_tpm == 9000

    response = client.post(
        LIST, {"action": "rotate_selected", "_selected_action": [issued.api_key.pk]}, follow=True
    )
    told = next(m for m in shown(response) if "shown once" in m)
    new_plain = re.search(r": (cp_[\w-]+)$", told)
    assert new_plain is not None, told
    memories = "/api/v1/users/u1/memories"  # scope memory.read, granted by the edit
    assert ApiClient(issued.plain_key).get(memories).status_code == 401
    assert ApiClient(new_plain.group(1)).get(memories).status_code == 200
    connection.set_schema_to_public()
    new_key = ApiKey.objects.get(tenant=acme.tenant, name="edited", revoked_at__isnull=True)
    assert new_key.budget_max_tokens == 5000

    client.post(LIST, {"action": "revoke_selected", "_selected_action": [new_key.pk]})
    assert ApiClient(new_plain.group(1)).get(memories).status_code == 401
    page = client.get(LIST).content.decode()
    assert "revoked" in page


def test_the_platform_host_has_no_tenant_keys_page(acme: TenantFixture) -> None:
    client = tenant_admin("public", "platform.localhost")
    assert client.get(LIST).status_code in (403, 404)


def test_a_key_revoked_on_the_page_is_dropped_from_every_kept_lookup(acme: TenantFixture) -> None:
    from contextplatform.core import config_cache
    from tenants import key_services, selectors
    from tenants.services import hash_key

    issued = issue_api_key(tenant=acme.tenant, name="kept")
    assert config_cache.wait_until_listening()
    kept = selectors._active_keys
    kept._keep(hash_key(issued.plain_key), issued.api_key, kept._generation)
    assert kept.peek(hash_key(issued.plain_key))[0]
    proxy = TenantApiKey.objects.get(pk=issued.api_key.pk)  # as the page's actions hold it
    key_services.revoke_key(api_key=proxy)
    assert not kept.peek(hash_key(issued.plain_key))[0]
