"""Requests that cannot fit the route's window are refused before any source is fetched."""

from __future__ import annotations

from typing import Any

from django_tenants.utils import schema_context

from contextplatform.routing.models import ReplayRecord

ROUTE = {
    "name": "small",
    "model": {"context_window": 1000},
    "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be brief."]}]},
}


def resolve(api: Any, messages: list[dict[str, Any]], **request: Any) -> Any:
    return api.post(
        "/api/v1/resolve", {"route": "small", "request": {"messages": messages, **request}}
    )


def test_output_reserve_larger_than_the_window_is_context_length_exceeded(
    acme_api: Any, acme: Any
) -> None:
    assert acme_api.post("/api/v1/routes", ROUTE).status_code == 201
    response = resolve(acme_api, [{"role": "user", "content": "hi"}], max_tokens=10**9)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    with schema_context(acme.schema):
        assert not ReplayRecord.objects.filter(route="small").exists()


def test_request_larger_than_the_input_budget_is_refused(acme_api: Any) -> None:
    assert acme_api.post("/api/v1/routes", ROUTE).status_code == 201
    huge = "word " * 2000
    response = resolve(acme_api, [{"role": "user", "content": huge}], max_tokens=100)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "900" in error["message"]  # 1000 window less 100 reserved


def test_request_that_fits_is_resolved(acme_api: Any) -> None:
    assert acme_api.post("/api/v1/routes", ROUTE).status_code == 201
    response = resolve(acme_api, [{"role": "user", "content": "hi"}], max_tokens=100)
    assert response.status_code == 200
    assert response.json()["budget"]["max_input"] == 900


def test_head_uses_the_read_scope_and_options_needs_none(acme_api: Any) -> None:
    assert (
        acme_api.client.head("/api/v1/routes", headers=acme_api._headers(None)).status_code == 200
    )
    assert acme_api.send("OPTIONS", "/api/v1/routes").status_code == 200
