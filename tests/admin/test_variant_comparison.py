"""The route's Variants page: its arms compared over a window of replay records and their
feedback, and each arm's numbers in the route's latest evaluation run; every missing number a
dash (the evaluation columns until the route has a finished run)."""

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
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection

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


DOCS = {
    "type": "rag",
    "name": "docs",
    "backend": "vectorstore",
    "backend_config": {"collection": "kb"},
}


def test_the_evaluation_columns_show_each_arms_latest_run(
    operator: Client, acme_api: ApiClient, django_capture_on_commit_callbacks: Any
) -> None:
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    body = {
        "name": "compared",
        "context": {"sources": [RULES, DOCS]},
        # The variant drops the documents the cases expect.
        "variants": [{"name": "b", "weight": 0.5, "context": {"sources": [RULES]}}],
    }
    assert acme_api.post("/api/v1/routes", body).status_code == 201
    cases = [
        {
            "id": "refund",
            "query": "Can I return my order within 30 days for a full refund?",
            "expect": {"documents": ["refund"]},
        },
        {
            "id": "kind",
            "query": "How should you talk to me?",
            "expect": {"text_containing": ["kind"]},
        },
    ]
    assert acme_api.put("/api/v1/routes/compared/evals", {"cases": cases}).status_code == 200
    rows = page_rows(operator)
    assert rows["main"]["hit_rate"] == rows["b"]["hit_rate"] == "—"  # no run yet

    with django_capture_on_commit_callbacks(execute=True):
        started = acme_api.post("/api/v1/routes/compared/evals/run")
    assert started.status_code == 202, started.content
    run = acme_api.get(f"/api/v1/eval-runs/{started.json()['run']}").json()
    assert run["status"] == "done", run
    main, b = run["arms"]["main"], run["arms"]["b"]
    assert (main["hit_rate"], b["hit_rate"]) == (1.0, 0.5)

    rows = page_rows(operator)
    assert rows["main"]["hit_rate"] == "1" and rows["b"]["hit_rate"] == "0.5"
    assert rows["main"]["kept_precision"] == f"{main['kept_precision']:g}" != "—"
    assert rows["b"]["kept_precision"] == "0"
    # The numbers are on the page itself, in b's row.
    with schema_context("acme"):
        route = Route.objects.get(name="compared")
    html = operator.get(admin_object_url(Route, route.pk, "variants")).content.decode()
    b_row = html[html.index('data-arm="b"') :].split("</tr>")[0]
    assert "<td>0.5</td><td>0</td>" in b_row


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
