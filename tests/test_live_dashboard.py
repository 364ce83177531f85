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


def test_the_dashboard_starts_with_the_latest_gateway_calls_too(acme: TenantFixture) -> None:
    from django.utils import timezone
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord

    answered = {"attempts": [{"deployment": "gpt", "outcome": "answered", "ms": 40}]}
    with schema_context(acme.schema):
        ReplayRecord.objects.create(
            id="rsv_call",
            route="support",
            status="ok",
            format="openai",
            created_at=timezone.now(),
            duration_ms=4.0,
            call_ms=52.5,
            tokens={**answered, "answered_by": "gpt"},
            deployment="gpt",
            input_tokens=120,
            output_tokens=9,
            cost_usd=0.0003,
            response_received_at=timezone.now(),
        )
        # a REST resolve: the client called its model itself, no call to show
        ReplayRecord.objects.create(
            id="rsv_rest",
            route="support",
            status="ok",
            format="openai",
            created_at=timezone.now(),
            duration_ms=2.0,
        )
    page = logged_in(acme.schema).get("/admin/live/", HTTP_HOST=ACME)
    (call,) = [event for event in page.context["history"] if event.get("kind") == "call"]
    assert call == {
        "kind": "call",
        "route": "support",
        "deployment": "gpt",
        "status": "ok",
        "ms": 52.5,
        "input_tokens": 120,
        "output_tokens": 9,
        "cached_input_tokens": 0,
        "cost_usd": 0.0003,
        "at": call["at"],
        "history": True,
    }
    html = page.content.decode()
    assert 'id="live-calls"' in html and 'href="/admin/spend/"' in html


def test_the_spend_page_sums_the_period_per_route_deployment_key_and_user(
    acme: TenantFixture, globex: TenantFixture
) -> None:
    from datetime import timedelta

    from django.utils import timezone
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord

    now = timezone.now()

    def made(schema: str, pk: str, route: str, cost: float, days_ago: int) -> None:
        with schema_context(schema):
            ReplayRecord.objects.create(
                id=pk,
                route=route,
                user_id="ann",
                status="ok",
                format="openai",
                created_at=now - timedelta(days=days_ago),
                duration_ms=1.0,
                deployment="gpt",
                input_tokens=100,
                output_tokens=10,
                cost_usd=cost,
            )

    made(acme.schema, "rsv_s1", "support", 0.5, 0)
    made(acme.schema, "rsv_s2", "sales", 1.5, 3)
    made(acme.schema, "rsv_s3", "old", 9.0, 60)  # outside the default 30 days
    made(globex.schema, "rsv_g1", "globex-route", 7.0, 0)
    client = logged_in(acme.schema)
    page = client.get("/admin/spend/", {"stack": "deployment"}, HTTP_HOST=ACME)
    assert page.status_code == 200
    by_route = page.context["tables"][0]
    assert [(row["group"], row["cost_usd"]) for row in by_route["rows"]] == [
        ("sales", 1.5),
        ("support", 0.5),
    ]
    assert page.context["total_cost"] == 2.0
    assert {row["group"] for row in page.context["daily"]["rows"]} == {"gpt"}
    html = page.content.decode()
    assert "/static/dashboard/spend.js" in html and 'id="spend-chart"' in html
    assert "globex-route" not in html
    longer = client.get("/admin/spend/", {"days": "90"}, HTTP_HOST=ACME)
    assert longer.context["total_cost"] == 11.0
    assert 'href="/admin/spend/"' in client.get("/admin/", HTTP_HOST=ACME).content.decode()
    # anonymous: the login page
    assert Client().get("/admin/spend/", HTTP_HOST=ACME).status_code == 302
