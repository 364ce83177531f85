"""Tenant admin users with a role, signed in through the real login page of their tenant's host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from tenants.admin_users import create_admin_user
from tenants.models import Tenant

PASSWORD = "a-long-enough-password"
ACME_HOST = "acme.localhost"
GLOBEX_HOST = "globex.localhost"
PLATFORM_HOST = "platform.localhost"  # no tenant's domain: the public schema


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(tenant: Tenant, username: str, role: str) -> None:
    """``role`` is a role name, or ``superuser``."""
    if role == "superuser":
        with schema_context(tenant.schema_name):
            get_user_model().objects.create_superuser(username, "", PASSWORD)
    else:
        create_admin_user(tenant=tenant, username=username, password=PASSWORD, role=role)
    connection.set_schema_to_public()


def signed_in(username: str, host: str) -> Client:
    client = Client(HTTP_HOST=host)
    response = client.post("/admin/login/", {"username": username, "password": PASSWORD})
    assert response.status_code == 302, f"{username} could not sign in at {host}"
    return client


@pytest.fixture
def admin_client_for(acme: Any) -> Callable[[str], Client]:
    """A client signed in to acme's admin as a new user holding ``role``."""

    def make(role: str) -> Client:
        make_user(acme.tenant, f"user_{role}", role)
        return signed_in(f"user_{role}", ACME_HOST)

    return make
