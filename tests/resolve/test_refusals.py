"""Refusals: requests that cannot fit the route's window are refused before any source is fetched,
in the words of ``pipeline/refusals``."""

from __future__ import annotations

from typing import Any

from django_tenants.utils import schema_context

from contextplatform.replay.models import ReplayRecord
from contextplatform.resolve.budget import Budget
from contextplatform.resolve.refusals import context_length_exceeded

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


# --- the wording, in one place -----------------------------------------------------------------


def test_context_length_exceeded_names_the_need_the_allowance_and_why() -> None:
    budget = Budget(context_window=1000, reserved_output=100, max_input=900, context=400)
    before = context_length_exceeded(2400, budget)
    after = context_length_exceeded(1200, budget, after_compression=True)
    assert (before.code, before.status, before.param) == ("context_length_exceeded", 400, "request")
    assert before.message == (
        "the request needs about 2400 input tokens but the route allows 900 "
        "(1000 window less 100 reserved for output)"
    )
    assert after.message.startswith("the request needs about 1200 input tokens")
    assert "after configured compression" in after.message
    assert "after configured compression" not in before.message


def test_a_negative_allowance_reads_as_zero() -> None:
    budget = Budget(context_window=100, reserved_output=500, max_input=-400, context=0)
    assert "the route allows 0 " in context_length_exceeded(10, budget).message
