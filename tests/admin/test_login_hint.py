"""A refused admin login says which admin the host serves: a tenant's users exist only on their
tenant's host, so signing in elsewhere looks like a wrong password."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.admin.conftest import ACME_HOST, PASSWORD, PLATFORM_HOST, make_user


def refused(host: str, username: str) -> str:
    response = Client(HTTP_HOST=host).post(
        "/admin/login/", {"username": username, "password": PASSWORD}
    )
    assert response.status_code == 200  # the form again, not a sign-in
    return " ".join(response.context["form"].non_field_errors())


def test_a_tenant_user_on_the_platform_host_is_told_where_to_sign_in(acme: Any) -> None:
    make_user(acme.tenant, "olga", "operator")
    error = refused(PLATFORM_HOST, "olga")
    assert "correct username and password" in error
    assert "This host serves the platform's admin" in error
    assert "tenant's own host" in error
    # shown to anyone who posts the form: it never lists the tenants or their hosts
    assert ACME_HOST not in error and acme.tenant.name not in error


def test_a_tenant_host_names_the_tenant_whose_admin_it_serves(acme: Any) -> None:
    error = refused(ACME_HOST, "nobody-here")
    assert f"the admin of the tenant {acme.tenant.name}" in error
    assert "platform host" in error
