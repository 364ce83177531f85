"""The role groups in every tenant schema, and ``create_tenant_user``."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django_tenants.utils import schema_context

from tenants import roles
from tenants.roles import ROLES, ensure_role_groups
from tests.admin.conftest import ACME_HOST, GLOBEX_HOST, PASSWORD, signed_in


def granted(schema: str) -> dict[str, set[str]]:
    with schema_context(schema):
        return {
            group.name: {
                f"{p.content_type.app_label}.{p.codename}"
                for p in group.permissions.select_related("content_type")
            }
            for group in Group.objects.filter(name__in=ROLES)
        }


@pytest.mark.parametrize("schema", ["acme", "globex"])
def test_every_tenant_created_has_its_role_groups(db: Any, schema: str) -> None:
    assert granted(schema) == {role: set(names) for role, names in ROLES.items()}


def test_the_roles_grant_what_their_names_say() -> None:
    assert ROLES["memory_manager"] == {
        "memory.view_memory",
        "memory.add_memory",
        "memory.change_memory",
        "memory.delete_memory",
    }
    assert all(name.split(".")[1].startswith("view_") for name in ROLES["auditor"])
    assert "routing.view_replayrecord" in ROLES["auditor"] & ROLES["operator"]
    assert not any("replayrecord" in name for name in ROLES["operator"] - ROLES["auditor"])
    assert not any(name.startswith(("auth.", "tenants.")) for name in ROLES["operator"])
    # Operators look a user's memories up; only memory managers write them.
    assert {name for name in ROLES["operator"] if name.startswith("memory.")} == {
        "memory.view_memory"
    }


def test_ensure_is_idempotent(db: Any) -> None:
    with schema_context("acme"):
        ensure_role_groups()
        ensure_role_groups()
        assert Group.objects.filter(name__in=ROLES).count() == len(ROLES)
    assert granted("acme") == {role: set(names) for role, names in ROLES.items()}


def test_migrating_an_existing_tenant_restores_its_groups(db: Any) -> None:
    with schema_context("globex"):
        Group.objects.filter(name="auditor").delete()
        operator = Group.objects.get(name="operator")
        operator.permissions.remove(Permission.objects.get(codename="change_route"))
        operator.permissions.add(Permission.objects.get(codename="delete_memory"))
    call_command("migrate_schemas", schema_name="globex", verbosity=0)
    connection.set_schema_to_public()
    assert granted("globex") == {role: set(names) for role, names in ROLES.items()}


def test_a_permission_that_does_not_exist_is_refused(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(roles.ROLES, "auditor", frozenset({"routing.view_nothing"}))
    with schema_context("acme"), pytest.raises(ImproperlyConfigured, match="view_nothing"):
        ensure_role_groups()


# --- create_tenant_user ----------------------------------------------------------------------------


def run(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command("create_tenant_user", *args, stdout=out, **options)
    connection.set_schema_to_public()
    return out.getvalue()


def test_creates_a_staff_user_with_its_role_in_that_tenant_only(acme: Any, globex: Any) -> None:
    output = run("acme", "ann", "--role", "auditor", "--password", PASSWORD)
    assert "ann (auditor)" in output and "acme.localhost" in output
    with schema_context("acme"):
        ann = get_user_model().objects.get(username="ann")
        assert ann.is_staff and not ann.is_superuser
        assert [group.name for group in ann.groups.all()] == ["auditor"]
    with schema_context("globex"):
        assert not get_user_model().objects.filter(username="ann").exists()
    client = signed_in("ann", ACME_HOST)
    assert client.get("/admin/routing/replayrecord/").status_code == 200
    assert client.get("/admin/routing/route/add/").status_code == 403


def test_the_password_may_come_from_the_environment(
    acme: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANT_USER_PASSWORD", PASSWORD)
    run("acme", "mia", "--role", "memory_manager")
    assert signed_in("mia", ACME_HOST).get("/admin/memory/memory/").status_code == 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere", "bob", "--role", "operator", "--password", PASSWORD], "no tenant named"),
        (["acme", "bob", "--role", "root", "--password", PASSWORD], "invalid choice"),
        (["acme", "bob", "--password", PASSWORD], "--role"),
        (["acme", "bob", "--role", "operator", "--password", "short"], "too short"),
        (["acme", "bob", "--role", "operator"], "no password"),
    ],
)
def test_bad_input_is_a_command_error_and_stores_nothing(
    acme: Any, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.delenv("TENANT_USER_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal: no prompt
    with pytest.raises(CommandError, match=message):
        run(*args)
    with schema_context("acme"):
        assert not get_user_model().objects.filter(username="bob").exists()


def test_a_taken_username_is_refused(acme: Any, globex: Any) -> None:
    run("acme", "cy", "--role", "operator", "--password", PASSWORD)
    with pytest.raises(CommandError, match="already exists"):
        run("acme", "cy", "--role", "auditor", "--password", PASSWORD)
    run("globex", "cy", "--role", "auditor", "--password", PASSWORD)  # another tenant's user
    assert signed_in("cy", GLOBEX_HOST).get("/admin/routing/route/add/").status_code == 403
