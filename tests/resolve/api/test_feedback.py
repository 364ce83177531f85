"""``POST /api/v1/resolve/{id}/feedback``: an application's verdict on a resolve, stored once per
record (posting again replaces it), shown with the record, and only on the tenant's own records."""

from __future__ import annotations

from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.replay.models import Feedback
from tests.conftest import ApiClient, TenantFixture

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}


def resolved_id(api: ApiClient) -> str:
    route = api.post("/api/v1/routes", {"name": "judged", "context": {"sources": [RULES]}})
    assert route.status_code in (201, 409), route.content
    body = {"model": "m", "messages": [{"role": "user", "content": "Where is my parcel?"}]}
    response = api.post("/api/v1/resolve", {"route": "judged", "user": "u1", "request": body})
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def feedback(api: ApiClient, record: str, body: Any) -> Any:
    return api.post(f"/api/v1/resolve/{record}/feedback", body)


def stored(schema: str, record: str) -> list[Feedback]:
    with schema_context(schema):
        return list(Feedback.objects.filter(record_id=record))


def test_feedback_is_stored_then_replaced(acme_api: ApiClient, acme: TenantFixture) -> None:
    record = resolved_id(acme_api)
    first = feedback(acme_api, record, {"score": 1, "comment": "spot on"})
    assert first.status_code == 201, first.content
    assert first.json()["id"] == record
    assert (first.json()["score"], first.json()["comment"]) == (1, "spot on")

    second = feedback(acme_api, record, {"score": -1})
    assert second.status_code == 200, second.content
    assert (second.json()["score"], second.json()["comment"]) == (-1, "")
    assert second.json()["created_at"] == first.json()["created_at"]

    (row,) = stored(acme.schema, record)
    assert (row.score, row.comment) == (-1, "")
    assert row.key_id is not None
    detail = acme_api.get(f"/api/v1/replay/{record}").json()
    assert detail["feedback"]["score"] == -1


def test_another_tenants_record_and_an_unknown_one_are_404(
    acme_api: ApiClient, globex_api: ApiClient, acme: TenantFixture
) -> None:
    record = resolved_id(acme_api)
    response = feedback(globex_api, record, {"score": 1})
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"
    assert stored(acme.schema, record) == []
    assert feedback(acme_api, "rsv_0000000000000000000000ff", {"score": 1}).status_code == 404
    assert feedback(acme_api, "nothing-like-an-id", {"score": 0}).status_code == 404


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"score": 2}, "score"),
        ({"score": "1"}, "score"),
        ({"score": True}, "score"),
        ({"score": 1.0}, "score"),
        ({"score": None}, "score"),
        ({}, "score"),
        ({"score": 1, "comment": "x" * 2001}, "comment"),
        ({"score": 1, "stars": 5}, "stars"),
    ],
)
def test_bad_feedback_is_400_naming_the_field(
    acme_api: ApiClient, acme: TenantFixture, body: dict[str, Any], param: str
) -> None:
    record = resolved_id(acme_api)
    response = feedback(acme_api, record, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == param
    assert stored(acme.schema, record) == []


def test_a_comment_of_2000_characters_is_kept(acme_api: ApiClient, acme: TenantFixture) -> None:
    record = resolved_id(acme_api)
    assert feedback(acme_api, record, {"score": 0, "comment": "y" * 2000}).status_code == 201
    assert stored(acme.schema, record)[0].comment == "y" * 2000
