"""The route's Variants page: its arms compared over a window of replay records and their
feedback, every missing number a dash (the evaluation columns until a route has evaluation sets)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Route
from tests.admin.conftest import ACME_HOST, make_user, signed_in
from tests.conftest import ApiClient, admin_object_url

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}


@pytest.fixture
def operator(acme: Any) -> Client:
    make_user(acme.tenant, "olga", "operator")
    return signed_in("olga", ACME_HOST)


def record(record_id: str, variant: str, *, ms: float, after: int, kept: int, age_days: float = 0):
    items = [{"source": "rules", "kept": True}] * kept + [{"source": "rules", "kept": False}]
    with schema_context("acme"):
        ReplayRecord.objects.create(
            id=record_id,
            route="compared",
            variant=variant,
            status="ok",
            format="openai",
            created_at=timezone.now() - timedelta(days=age_days),
            duration_ms=ms,
            tokens={"before": 10, "after": after},
            items=items,
        )


def page_rows(client: Client, days: int | None = None) -> dict[str, dict[str, Any]]:
    with schema_context("acme"):
        route = Route.objects.get(name="compared")
    url = admin_object_url(Route, route.pk, "variants")
    response = client.get(url, {"days": days} if days else {})
    assert response.status_code == 200, response.status_code
    return {row["arm"]: row for row in response.context["rows"]}


def test_the_arms_are_compared_over_the_window(operator: Client, acme_api: ApiClient) -> None:
    body = {
        "name": "compared",
        "context": {"sources": [RULES]},
        "variants": [{"name": "b", "weight": 0.25, "context": {}}],
    }
    assert acme_api.post("/api/v1/routes", body).status_code == 201
    record("rsv_m1", "main", ms=10, after=100, kept=1)
    record("rsv_m2", "main", ms=20, after=200, kept=3)
    record("rsv_m3", "main", ms=90, after=300, kept=2)
    record("rsv_b1", "b", ms=5, after=50, kept=0)
    record("rsv_old", "b", ms=500, after=5000, kept=9, age_days=20)
    for record_id, score in (("rsv_m1", 1), ("rsv_m2", -1), ("rsv_m3", 1), ("rsv_b1", 1)):
        given = acme_api.post(f"/api/v1/resolve/{record_id}/feedback", {"score": score})
        assert given.status_code == 201, given.content

    rows = page_rows(operator)
    assert list(rows) == ["main", "b"]
    main, b = rows["main"], rows["b"]
    assert (main["weight"], b["weight"]) == ("75%", "25%")
    assert (main["requests"], main["mean_tokens"], main["p50_ms"]) == (3, "200", "20 ms")
    assert main["mean_kept"] == "2"
    assert (main["feedback"], main["up"], main["down"], main["mean_score"]) == (3, 2, 1, "0.33")
    assert (b["requests"], b["mean_kept"], b["feedback"], b["mean_score"]) == (1, "0", 1, "1")
    assert main["hit_rate"] == b["hit_rate"] == "—"  # no evaluation set

    wider = page_rows(operator, days=30)
    assert wider["b"]["requests"] == 2
    assert wider["b"]["feedback"] == 1  # the old record has none


def test_a_route_without_variants_shows_main_alone(operator: Client, acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", {"name": "compared"}).status_code == 201
    rows = page_rows(operator)
    assert list(rows) == ["main"]
    assert rows["main"]["requests"] == 0
    assert rows["main"]["mean_tokens"] == rows["main"]["p50_ms"] == "—"


def test_the_route_page_links_its_variants(operator: Client, acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", {"name": "compared"}).status_code == 201
    with schema_context("acme"):
        route = Route.objects.get(name="compared")
    page = operator.get(admin_object_url(Route, route.pk))
    assert admin_object_url(Route, route.pk, "variants") in page.content.decode()
