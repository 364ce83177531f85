"""A refused admin login says which admin the host serves: a tenant's users exist only on their
tenant's host, so signing in elsewhere looks like a wrong password."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client
from django_tenants.utils import schema_context

from tests.admin.conftest import ACME_HOST, PASSWORD, PLATFORM_HOST, make_user


def refused(host: str, username: str) -> str:
    response = Client(HTTP_HOST=host).post(
        "/admin/login/", {"username": username, "password": PASSWORD}
    )
    assert response.status_code == 200  # the form again, not a sign-in
    return " ".join(response.context["form"].non_field_errors())


def test_a_refused_login_on_the_platform_host_says_where_tenant_users_sign_in(acme: Any) -> None:
    make_user(acme.tenant, "olga", "operator")
    error = refused(PLATFORM_HOST, "nobody-here")
    assert "correct username and password" in error
    assert "This host serves the platform's admin" in error
    assert "tenant's own host" in error
    # shown to anyone who posts the form: it never lists the tenants or their hosts (only a
    # password that is right on another host names that host: see below)
    assert ACME_HOST not in error and acme.tenant.name not in error


def test_a_tenant_host_names_the_tenant_whose_admin_it_serves(acme: Any) -> None:
    error = refused(ACME_HOST, "nobody-here")
    assert f"the admin of the tenant {acme.tenant.name}" in error
    assert "platform host" in error


def test_the_right_password_on_the_wrong_host_names_the_host_of_the_account(acme: Any) -> None:
    make_user(acme.tenant, "olga", "operator")
    error = refused(PLATFORM_HOST, "olga")
    assert "correct username and password" not in error  # the password is not wrong
    assert "belongs to another host's admin" in error
    assert f"sign in on {ACME_HOST}" in error


def test_a_platform_administrator_on_a_tenant_host_is_sent_to_the_platform_host(
    acme: Any,
) -> None:
    with schema_context("public"):
        get_user_model().objects.create_superuser("pat", "", PASSWORD)
    error = refused(ACME_HOST, "pat")
    assert "belongs to another host's admin" in error
    assert f"the admin of the tenant {acme.tenant.name}" in error
    assert "sign in on the platform host" in error


def test_a_wrong_password_names_no_host(acme: Any) -> None:
    make_user(acme.tenant, "olga", "operator")
    response = Client(HTTP_HOST=PLATFORM_HOST).post(
        "/admin/login/", {"username": "olga", "password": "not-the-password"}
    )
    error = " ".join(response.context["form"].non_field_errors())
    assert "correct username and password" in error
    assert ACME_HOST not in error and "belongs to" not in error
