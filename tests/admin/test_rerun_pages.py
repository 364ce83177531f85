"""The admin's Re-run of a replay record (the record beside its request resolved again, and the
diff), and the route page's "Try this draft" (the unsaved form against the route's latest
captured requests), with Django's test client against real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Route
from memory.models import Memory
from sources.models import ChatMessage
from tests.admin.forms import FormFields
from tests.conftest import ApiClient, TenantFixture, admin_object_url
from tests.resolve.api.test_rerun import RULES, context, make_route, rag, resolved, set_capture
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection


@pytest.fixture
def records(acme: TenantFixture, acme_api: ApiClient) -> Iterator[list[str]]:
    """Three captured resolves of route ``rr`` (a RAG source and rules)."""
    set_capture(acme, True)
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    make_route(acme_api, context(rag(), RULES))
    yield [resolved(acme_api) for _ in range(3)]
    set_capture(acme, False)


def written(acme: TenantFixture) -> tuple[int, int, int]:
    with schema_context(acme.schema):
        return ReplayRecord.objects.count(), ChatMessage.objects.count(), Memory.objects.count()


def test_the_record_page_links_its_rerun_which_shows_both_sides(
    acme: TenantFixture, records: list[str], admin_client_for: Callable[[str], Client]
) -> None:
    auditor = admin_client_for("auditor")
    record = records[0]
    page = auditor.get(admin_object_url(ReplayRecord, record))
    assert page.status_code == 200
    rerun_url = f"/admin/routing/replayrecord/{record}/rerun/"
    assert rerun_url in page.content.decode()
    before = written(acme)
    response = auditor.get(rerun_url)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="rerun-recorded-items"' in html and 'id="rerun-rerun-items"' in html
    assert "warranty" in html  # the kept document, named by its id
    assert "No item changed." in html
    assert written(acme) == before


def test_the_rerun_page_says_when_nothing_was_captured(
    acme: TenantFixture, acme_api: ApiClient, admin_client_for: Callable[[str], Client]
) -> None:
    make_route(acme_api, context(RULES), name="plain")
    record = resolved(acme_api, "plain")
    response = admin_client_for("auditor").get(f"/admin/routing/replayrecord/{record}/rerun/")
    assert response.status_code == 200
    assert "capture_content" in response.content.decode()


def change_form(client: Client, route: Route) -> dict[str, Any]:
    page = client.get(admin_object_url(Route, route.pk))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="try-draft-button"' in html
    fields = FormFields("route_form")
    fields.feed(html)
    return dict(fields.data)


def try_url(route: Route) -> str:
    return admin_object_url(Route, route.pk).replace("/change/", "/try-draft/")


def test_a_draft_without_the_rag_source_is_tried_on_the_last_requests_before_saving(
    acme: TenantFixture, records: list[str], admin_client_for: Callable[[str], Client]
) -> None:
    operator = admin_client_for("operator")
    with schema_context(acme.schema):
        route = Route.objects.get(name="rr")
        saved_context = route.context
    data = change_form(operator, route)
    # The form's sources: drop the RAG row (the first), keep the rules.
    data["sources-0-DELETE"] = ["on"]
    data["try_draft_last"] = ["2"]
    before = written(acme)
    response = operator.post(try_url(route), data)
    assert response.status_code == 200, response.content
    html = response.content.decode()
    trial = response.context["trial"]
    assert trial is not None, response.context["errors"]
    assert trial.records == 2  # the last two of three
    assert trial.tokens_saved > 0
    assert trial.items_changed >= 2  # each request loses at least one document
    assert [line["id"] for line in trial.lines] == records[:0:-1]
    assert 'id="trial-tokens-saved"' in html
    assert written(acme) == before
    with schema_context(acme.schema):
        assert Route.objects.get(name="rr").context == saved_context  # not saved


def test_a_draft_whose_source_fails_says_so(
    acme: TenantFixture, records: list[str], admin_client_for: Callable[[str], Client]
) -> None:
    operator = admin_client_for("operator")
    with schema_context(acme.schema):
        route = Route.objects.get(name="rr")
    data = change_form(operator, route)
    data["sources-0-timeout_ms"] = ["1"]  # the RAG source cannot answer in a millisecond
    response = operator.post(try_url(route), {**data, "try_draft_last": ["1"]})
    assert response.status_code == 200
    trial = response.context["trial"]
    assert trial is not None, response.context["errors"]
    assert dict(trial.failing) == {"docs": 1}


def test_a_bad_draft_or_count_is_reported_not_tried(
    acme: TenantFixture, records: list[str], admin_client_for: Callable[[str], Client]
) -> None:
    operator = admin_client_for("operator")
    with schema_context(acme.schema):
        route = Route.objects.get(name="rr")
    data = change_form(operator, route)
    too_many = operator.post(try_url(route), {**data, "try_draft_last": ["501"]})
    assert too_many.context["trial"] is None
    assert "between 1 and 500" in too_many.content.decode()
    bad = operator.post(try_url(route), {**data, "sources-1-priority": ["x"]})
    assert bad.context["trial"] is None and bad.context["errors"]


def test_only_who_may_change_the_route_tries_a_draft(
    acme: TenantFixture, records: list[str], admin_client_for: Callable[[str], Client]
) -> None:
    auditor = admin_client_for("auditor")
    with schema_context(acme.schema):
        route = Route.objects.get(name="rr")
    assert auditor.post(try_url(route), {"try_draft_last": "1"}).status_code == 403
    operator = admin_client_for("operator")
    page = operator.get(try_url(route))  # no draft to try: the way to send one
    assert page.status_code == 200 and page.context["trial"] is None
    assert 'id="trial-how"' in page.content.decode()
