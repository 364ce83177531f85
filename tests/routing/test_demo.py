"""``make run``'s demo: ``bootstrap_demo`` creates the tenant, its route, documents and admin users,
prints a working key and password, and replaces both at every start."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.routing.demo import DEMO_RESOLVE_BODY
from tenants.roles import ROLES
from tests.conftest import ApiClient

DEMO_HOST = "demo.localhost"


def bootstrap() -> tuple[str, str]:
    out = io.StringIO()
    call_command("bootstrap_demo", stdout=out)
    connection.set_schema_to_public()
    text = out.getvalue()
    key = re.search(r"API key \(all scopes, replaced at every start\): (\S+)", text)
    password = re.search(r"password \(replaced at every start\): (\S+)", text)
    assert key and password, text
    assert f"http://{DEMO_HOST}:" in text and "/admin/live/" in text
    return key.group(1), password.group(1)


def admin_login(username: str, password: str) -> Client:
    client = Client(HTTP_HOST=DEMO_HOST)
    client.post("/admin/login/", {"username": username, "password": password, "next": "/admin/"})
    return client


@pytest.mark.django_db(transaction=False)
def test_the_demo_serves_its_route_and_admin_and_renews_its_secrets(db: Any) -> None:
    key, password = bootstrap()

    response = ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY)
    assert response.status_code == 200, response.content
    report = response.json()
    by_name = {source["name"]: source for source in report["sources"]}
    assert set(by_name) == {"guardrails", "profile", "history", "docs"}
    assert all(source["status"] == "ok" for source in by_name.values()), by_name
    assert by_name["docs"]["items"] >= 1  # the demo collection was ingested and is recalled
    system = report["request"]["messages"][0]
    assert system["role"] == "system" and "refund" in system["content"].lower()

    for role in ROLES:
        assert admin_login(role, password).get("/admin/").status_code == 200
    operator = admin_login("operator", password)
    assert operator.get("/admin/routing/route/").status_code == 200
    assert operator.get("/admin/live/").status_code == 200
    assert admin_login("auditor", password).get("/admin/routing/route/add/").status_code == 403

    # A second start replaces the key and the password; the old ones stop working.
    new_key, new_password = bootstrap()
    assert new_key != key and new_password != password
    assert ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 401
    assert ApiClient(new_key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 200
    assert admin_login("operator", password).get("/admin/").status_code == 302
    assert admin_login("operator", new_password).get("/admin/").status_code == 200
    with schema_context("demo"):
        from contextplatform.routing.models import Route

        assert list(Route.objects.values_list("name", flat=True)) == ["support"]
