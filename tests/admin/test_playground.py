"""The tenant admin's playground: a message sent on a route through the gateway, its answer, the
context injected and the replay record, on a real loopback model."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.replay.models import ReplayRecord
from sources.models import ChatMessage
from tenants.models import ApiKey, Tenant
from tenants.services import PLAYGROUND_KEY_NAME
from tests.conftest import ApiClient, TenantFixture
from tests.fake_models import chat_reply
from tests.loopback import LOOPBACK, Service, outbound_allowlist, running_service

GUARDRAIL = "Always answer in the voice of a pirate."


@pytest.fixture
def model(acme: TenantFixture, acme_api: ApiClient) -> Iterator[Service]:
    """A loopback chat model the acme route ``pirate`` forwards to, echoing what it was sent."""
    with running_service() as service, outbound_allowlist(acme.schema, [LOOPBACK]):
        service.responder = lambda seen: chat_reply(f"Arr, {len(seen.body['messages'])} messages")
        deployment = {
            "name": "played",
            "protocol": "openai",
            "base_url": f"{service.base}/v1",
            "model": "played-model",
        }
        assert acme_api.post("/api/v1/deployments", deployment).status_code == 201
        route = {
            "name": "pirate",
            "model": {"upstream": "played"},
            "context": {
                "sources": [{"type": "skill_guardrails", "name": "voice", "texts": [GUARDRAIL]}]
            },
        }
        assert acme_api.post("/api/v1/routes", route).status_code == 201
        yield service


@pytest.fixture
def operator(admin_client_for: Callable[[str], Client]) -> Client:
    return admin_client_for("operator")  # a role that changes routes


def send(operator: Client, message: str, session: str = "pg-1") -> str:
    response = operator.post(
        "/admin/playground/",
        {"route": "pirate", "user": "u_pg", "session": session, "message": message},
    )
    assert response.status_code == 200
    return response.content.decode()


def test_the_playground_sends_through_the_gateway_and_shows_what_the_model_saw(
    acme: TenantFixture, model: Service, operator: Client
) -> None:
    with schema_context("public"):
        Tenant.objects.filter(schema_name=acme.schema).update(capture_content=True)
    page = operator.get("/admin/playground/").content.decode()
    assert '<option value="pirate">pirate</option>' in page

    html = send(operator, "Where is my parcel?")
    # The model's answer, as the client would receive it ...
    assert re.search(r'id="playground-answer">Arr, 3 messages<', html), html
    # ... what the model was sent: the guardrail injected as a tool exchange before it ...
    sent = model.requests[-1].json
    injected = [m for m in sent["messages"] if m["role"] == "tool"]
    assert injected and injected[0]["content"] == GUARDRAIL
    assert GUARDRAIL in html
    # ... and the replay record, linked and shown.
    with schema_context(acme.schema):
        record = ReplayRecord.objects.get(route="pirate")
        assert record.user_id == "u_pg" and record.session_key == "pg-1"
        assert ChatMessage.objects.filter(session__key="pg-1").count() == 2  # the turn written
    assert f"/admin/routing/replayrecord/{record.pk}/change/" in html
    assert "Deployment: played" in html
    # The next message goes on in the same session.
    assert 'value="pg-1"' in html
    with schema_context("public"):
        key = ApiKey.objects.get(tenant=acme.tenant, name=PLAYGROUND_KEY_NAME)
        assert key.scopes == ["resolve"]


def test_an_upstream_error_is_shown_not_raised(
    acme: TenantFixture, model: Service, operator: Client
) -> None:
    model.responder = lambda seen: chat_reply("boom", status=500)
    html = send(operator, "hello")
    assert re.search(r'id="playground-error">502: ', html), html


def test_bad_input_is_a_form_error(acme: TenantFixture, model: Service, operator: Client) -> None:
    response = operator.post(
        "/admin/playground/",
        {"route": "nope", "user": "u pg", "session": "s", "message": ""},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("errorlist") >= 3
    assert not model.requests


def test_the_playground_needs_a_signed_in_operator(acme: TenantFixture) -> None:
    response = Client(HTTP_HOST="acme.localhost").get("/admin/playground/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_without_captured_content_the_record_still_says_what_was_kept(
    acme: TenantFixture, model: Service, operator: Client
) -> None:
    html = send(operator, "hi", session="pg-2")
    assert "does not capture content" in html
    assert "voice" in html  # the sources table of the record


def test_auditors_may_not_spend_on_a_route(
    acme: TenantFixture, model: Service, admin_client_for: Callable[[str], Client]
) -> None:
    auditor = admin_client_for("auditor")
    assert auditor.get("/admin/playground/").status_code == 403
    response = auditor.post(
        "/admin/playground/", {"route": "pirate", "user": "u", "session": "s", "message": "x"}
    )
    assert response.status_code == 403
    assert not model.requests
