"""A write and its answer are one transaction (``core.views.ApiView.atomic_writes``): when the
answer cannot be made after the row was written, the client gets a 500 and nothing is left
behind, so a client that retries makes no duplicate."""

from __future__ import annotations

from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.routes.models import Route
from memory import views as memory_views
from memory.models import Memory
from sources import views as source_views
from sources.models import UserProfile
from tests.conftest import ApiClient, TenantFixture


def broken(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the answer could not be made")


def rows(schema: str, model: Any, **filters: Any) -> int:
    with schema_context(schema):
        return int(model.objects.filter(**filters).count())


def test_a_memory_whose_answer_fails_is_not_kept(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_views, "memory_representation", broken)
    response = acme_api.post(
        "/api/v1/users/u-atomic/memories", {"content": "User moved to Lisbon last month."}
    )
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert rows(acme.schema, Memory, user_id="u-atomic") == 0


def test_a_profile_whose_answer_fails_is_not_written(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_views, "Response", broken)
    response = acme_api.put("/api/v1/users/u-atomic/profile", {"attributes": {"tier": "gold"}})
    assert response.status_code == 500
    assert rows(acme.schema, UserProfile, user_id="u-atomic") == 0


def test_a_route_whose_answer_fails_is_not_created(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextplatform.routes import api as route_views

    monkeypatch.setattr(route_views, "Response", broken)
    response = acme_api.post("/api/v1/routes", {"name": "atomic-route", "context": {"sources": []}})
    assert response.status_code == 500
    assert rows(acme.schema, Route, name="atomic-route") == 0


def test_a_write_that_answers_is_kept(acme_api: ApiClient, acme: TenantFixture) -> None:
    response = acme_api.post(
        "/api/v1/users/u-atomic/memories", {"content": "User moved to Lisbon last month."}
    )
    assert response.status_code == 201, response.content
    assert rows(acme.schema, Memory, user_id="u-atomic") == 1
