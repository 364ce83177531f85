"""Who may open the tenant admin's live dashboard (tests/browser/test_live_dashboard.py watches it
draw in Chromium, its script served by the ASGI application)."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.conftest import TenantFixture, logged_in

ACME = "acme.localhost"
PLATFORM = "127.0.0.1"  # no tenant's domain: the platform host


def test_a_staff_user_of_the_tenant_sees_the_dashboard_and_its_link(acme: TenantFixture) -> None:
    client = logged_in(acme.schema)
    page = client.get("/admin/live/", HTTP_HOST=ACME)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-socket-path="/ws/metrics/"' in html
    assert "/static/dashboard/live.js" in html
    assert 'href="/admin/live/"' in client.get("/admin/", HTTP_HOST=ACME).content.decode()


def test_anonymous_and_non_staff_users_are_sent_to_the_login(acme: TenantFixture) -> None:
    for client in (Client(), logged_in(acme.schema, staff=False)):
        response = client.get("/admin/live/", HTTP_HOST=ACME)
        assert response.status_code == 302
        assert response["Location"] == "/admin/login/?next=/admin/live/"


def test_the_platform_host_has_no_dashboard(db: Any) -> None:
    client = logged_in("public")
    assert client.get("/admin/live/", HTTP_HOST=PLATFORM).status_code == 404
    index = client.get("/admin/", HTTP_HOST=PLATFORM)
    assert index.status_code == 200
    assert "/admin/live/" not in index.content.decode()


def test_the_dashboard_starts_with_the_latest_resolves_of_its_tenant(acme: TenantFixture) -> None:
    from django.utils import timezone
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord

    failed = {"type": "rag", "status": "failed", "items": 0, "kept": 0, "ms": 3.5}
    with schema_context(acme.schema):
        ReplayRecord.objects.create(
            id="rsv_dash",
            route="support",
            status="partial",
            format="openai",
            created_at=timezone.now(),
            duration_ms=4.0,
            sources=[{"name": "kb", **failed, "error": "refused: loopback"}],
        )
    page = logged_in(acme.schema).get("/admin/live/", HTTP_HOST=ACME)
    assert page.context["history"] == [
        {
            "source": "kb",
            **failed,
            "route": "support",
            "error": "refused: loopback",
            "history": True,
        }
        | {"at": page.context["history"][0]["at"]}
    ]
    assert 'id="live-history"' in page.content.decode()
