"""The tenant's outbound allow-list, on every write path: ``set_allowlist`` and
``create_tenant --allow`` (the contract's operations commands), and the platform admin's tenant
form. Each refuses an entry that is not a host, an IP, ``host:port`` or a CIDR, naming it, and
writes nothing."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import JSONField, Value
from django.test import Client

from tenants.models import Tenant
from tests.admin.forms import form_data
from tests.conftest import TenantFixture

PLATFORM_HOST = "platform.localhost"  # no tenant's domain: the public schema
PASSWORD = "a-long-enough-password"
BAD = ["127.0.0.1:99999", "not a host!", "10.0.0.0/8:443", "http://10.0.0.1/"]


def allowlist_of(schema: str) -> list[str]:
    connection.set_schema_to_public()
    return list(Tenant.objects.get(schema_name=schema).outbound_allowlist)


def set_allowlist(*args: str) -> str:
    out = StringIO()
    call_command("set_allowlist", *args, stdout=out)
    return out.getvalue()


def test_set_allowlist_replaces_and_clears_the_list(acme: TenantFixture) -> None:
    entries = ["search.internal", "127.0.0.1:8001", "[::1]:8001", "10.0.0.0/8"]
    printed = set_allowlist("acme", *entries)
    assert allowlist_of("acme") == entries
    assert "127.0.0.1:8001" in printed
    set_allowlist("acme", "localhost:9000")
    assert allowlist_of("acme") == ["localhost:9000"]
    assert "public addresses only" in set_allowlist("acme")  # no entry: cleared
    assert allowlist_of("acme") == []


@pytest.mark.parametrize("bad", BAD)
def test_set_allowlist_refuses_a_bad_entry_by_name(acme: TenantFixture, bad: str) -> None:
    set_allowlist("acme", "127.0.0.1:8001")
    with pytest.raises(CommandError) as refused:
        set_allowlist("acme", "search.internal", bad)
    assert repr(bad) in str(refused.value)
    assert allowlist_of("acme") == ["127.0.0.1:8001"]  # unchanged


def test_set_allowlist_names_an_unknown_tenant(db: Any) -> None:
    with pytest.raises(CommandError, match="no tenant named 'nobody'"):
        set_allowlist("nobody", "127.0.0.1")


def test_create_tenant_with_allow(new_tenant_name: str) -> None:
    out = StringIO()
    call_command(
        "create_tenant",
        new_tenant_name,
        "--allow",
        "127.0.0.1:8001",
        "search.internal",
        "--allow",
        "10.0.0.0/8",
        stdout=out,
    )
    assert allowlist_of(new_tenant_name) == ["127.0.0.1:8001", "search.internal", "10.0.0.0/8"]
    assert "outbound allow-list: 127.0.0.1:8001 search.internal 10.0.0.0/8" in out.getvalue()


def test_create_tenant_refuses_a_bad_entry_and_creates_nothing(new_tenant_name: str) -> None:
    with pytest.raises(CommandError) as refused:
        call_command(
            "create_tenant", new_tenant_name, "--allow", "127.0.0.1:8001", *BAD, stdout=StringIO()
        )
    for bad in BAD:  # every bad entry named at once
        assert repr(bad) in str(refused.value)
    assert not Tenant.objects.filter(schema_name=new_tenant_name).exists()


# --- the platform admin ---------------------------------------------------------------------


@pytest.fixture
def platform_admin(acme: TenantFixture, settings: Any) -> Client:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    connection.set_schema_to_public()
    get_user_model().objects.create_superuser("platform_op", "", PASSWORD)
    client = Client(HTTP_HOST=PLATFORM_HOST)
    signed_in = client.post("/admin/login/", {"username": "platform_op", "password": PASSWORD})
    assert signed_in.status_code == 302
    return client


def save_in_admin(client: Client, tenant: Tenant, allowlist: str) -> Any:
    page = f"/admin/tenants/tenant/{tenant.pk}/change/"
    form = client.get(page)
    assert form.status_code == 200
    data = form_data(form.content.decode(), "tenant_form")
    data["outbound_allowlist"] = [allowlist]
    return client.post(page, data)


def test_the_platform_admin_saves_port_entries_and_refuses_bad_ones(
    acme: TenantFixture, platform_admin: Client
) -> None:
    saved = save_in_admin(platform_admin, acme.tenant, '["127.0.0.1:8001", "[::1]:8001"]')
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    assert allowlist_of("acme") == ["127.0.0.1:8001", "[::1]:8001"]

    refused = save_in_admin(platform_admin, acme.tenant, '["search.internal", "127.0.0.1:0"]')
    assert refused.status_code == 200  # the form again, with its error
    errors = refused.content.decode().split('class="errorlist', 1)[1].split("</ul>", 1)[0]
    assert "the port of &#x27;127.0.0.1:0&#x27; is not a number from 1 to 65535" in errors
    assert allowlist_of("acme") == ["127.0.0.1:8001", "[::1]:8001"]


# --- what the database already holds --------------------------------------------------------


def test_a_stored_list_reads_back_as_strings_whatever_the_column_holds(
    acme: TenantFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """Written past every validating path (an update, SQL): what is not a string allows nothing,
    so that no reader of the list (clients are kept per allow-list) fails on it."""
    connection.set_schema_to_public()
    tenants = Tenant.objects.filter(schema_name="acme")
    tenants.update(outbound_allowlist=["127.0.0.1:8001", {"host": "10.0.0.1"}, ["x"], 5, "bad!"])
    assert tenants.get().outbound_allowlist == ["127.0.0.1:8001", "bad!"]
    assert "not strings" in caplog.text
    json_null = Value(None, JSONField())
    for stored in ({"host": "10.0.0.1"}, "127.0.0.1", 5, json_null):
        tenants.update(outbound_allowlist=stored)
        assert tenants.get().outbound_allowlist == []
