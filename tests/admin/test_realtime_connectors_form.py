"""A realtime_apis source on the route page: its connectors in their own column (a JSON list),
stored as written (header values encrypted), shown again on the change page (header values as
{"set": true}, which resubmitted keep them), and every error of a connector next to the
column, naming the connector and its field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.routes.models import Route
from tests.admin.forms import form_data
from tests.admin.test_operator_admin import (
    ROUTES,
    cell_error,
    change_url,
    field_errors,
    route_form,
    stored_route,
)
from tests.conftest import TenantFixture

CONNECTORS = [
    {
        "name": "balance",
        "url": "https://bank.example/accounts/{user}/balance",
        "headers": {"X-User": "{user}"},
        "select": "$.accounts[*]",
        "timeout_ms": 300,
        "cache_ttl_seconds": 5,
    },
    {
        "name": "rates",
        "method": "POST",
        "url": "https://fx.example/rates",
        "body": {"q": "{query}"},
    },
]


def live_row(connectors: Any = CONNECTORS, **fields: str) -> dict[str, str]:
    return {
        "name": "live",
        "type": "realtime_apis",
        "enabled": "on",
        "priority": "70",
        "connectors": connectors if isinstance(connectors, str) else json.dumps(connectors),
        "ORDER": "1",
        **fields,
    }


@pytest.fixture
def operator(admin_client_for: Callable[[str], Client]) -> Client:
    return admin_client_for("superuser")


def test_connectors_are_stored_as_written_and_shown_again(
    acme: TenantFixture, operator: Client
) -> None:
    response = operator.post(f"{ROUTES}add/", route_form(rows=[live_row()]))
    assert response.status_code == 302, field_errors(response)
    route = stored_route()
    stored = route.context["sources"][0]["connectors"]
    assert set(stored[0]["headers"]["X-User"]) == {"encrypted"}
    shown = [{**CONNECTORS[0], "headers": {"X-User": {"set": True}}}, CONNECTORS[1]]
    assert route.context["sources"] == [
        {
            "name": "live",
            "type": "realtime_apis",
            "priority": 70,
            "connectors": [{**shown[0], "headers": stored[0]["headers"]}, CONNECTORS[1]],
        }
    ]
    page = operator.get(change_url(route)).content.decode()
    data = form_data(page, "route_form")
    assert json.loads(data["sources-0-connectors"][0]) == shown
    assert data["sources-0-settings"] == [""]  # nothing left for "other settings"
    assert operator.post(change_url(route), data).status_code == 302  # resubmitted unchanged
    assert stored_route().context == route.context


@pytest.mark.parametrize(
    ("connectors", "message"),
    [
        (
            [{**CONNECTORS[0], "url": "https://{user}.bank.example/"}],
            "connector 1 (balance), url: a template in the host",
        ),
        (
            [CONNECTORS[0], {**CONNECTORS[1], "select": "rates"}],
            "connector 2 (rates), select: a path starts with $",
        ),
        ([CONNECTORS[0], CONNECTORS[0]], "connectors: balance named more than once"),
        ([], "List should have at least 1 item"),
        ('{"name": "balance"}', "Write a JSON list of connectors"),
        ("[{", "Enter a valid JSON"),
    ],
    ids=["host-template", "bad-select", "twice", "empty", "not-a-list", "not-json"],
)
def test_a_bad_connector_is_shown_next_to_the_connectors(
    acme: TenantFixture, operator: Client, connectors: Any, message: str
) -> None:
    response = operator.post(f"{ROUTES}add/", route_form(rows=[live_row(connectors)]))
    assert response.status_code == 200
    errors = field_errors(response)
    assert any(message in text for text in errors.get("sources[0].connectors", [])), errors
    shown = cell_error(response.content.decode(), "connectors")
    assert message.replace("'", "&#x27;") in shown or message in shown
    with schema_context("acme"):
        assert not Route.objects.exists()


def test_connectors_belong_to_realtime_apis_rows_only(
    acme: TenantFixture, operator: Client
) -> None:
    row = live_row(type="recent_messages")
    response = operator.post(f"{ROUTES}add/", route_form(rows=[row]))
    assert response.status_code == 200
    errors = field_errors(response)
    assert errors["sources[0].connectors"] == ["A recent_messages source has no connectors."]


def test_connectors_written_in_other_settings_still_work(
    acme: TenantFixture, operator: Client
) -> None:
    row = live_row("", settings=json.dumps({"connectors": CONNECTORS}))
    response = operator.post(f"{ROUTES}add/", route_form(rows=[row]))
    assert response.status_code == 302, field_errors(response)
    stored = stored_route().context["sources"][0]["connectors"]
    assert stored == [{**CONNECTORS[0], "headers": stored[0]["headers"]}, CONNECTORS[1]]
    assert set(stored[0]["headers"]["X-User"]) == {"encrypted"}
