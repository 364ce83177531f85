"""The responses the gateway keeps, on the real database: the caller's own only (another user's
is as unknown as a missing one), none of the content where the tenant does not capture it,
retention by the tenant's memory age (else 30 days); and ``openai_responses`` as a deployment's
protocol through the REST API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.gateway.models import StoredResponse
from contextplatform.gateway.protocol import GatewayError
from contextplatform.gateway.response_lookup import previous_items, stored_response
from contextplatform.gateway.response_store import (
    DEFAULT_MAX_AGE_DAYS,
    keep_response,
    purge_responses,
)
from contextplatform.gateway.tasks import purge_stored_responses_task
from contextplatform.gateway.upstreams import upstreams_for
from tests.conftest import ApiClient, TenantFixture

ITEMS = [{"type": "message", "role": "user", "content": "hi"}]


def kept(response_id: str, user: str | None = "ann", *, capture: bool = True) -> None:
    keep_response(
        response_id,
        user=user,
        route="r",
        items=ITEMS,
        response={"id": response_id, "object": "response", "output": []},
        capture_content=capture,
    )


def refusal(work: Any) -> GatewayError:
    with pytest.raises(GatewayError) as refused:
        work()
    return refused.value


def test_only_the_callers_own_response_reads(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        kept("resp_ann")
        kept("resp_nobody", None)
        assert stored_response("resp_ann", "ann")["id"] == "resp_ann"
        assert previous_items("resp_ann", "ann") == ITEMS
        assert stored_response("resp_nobody", None)["id"] == "resp_nobody"
        for response_id, user in [("resp_ann", "bob"), ("resp_ann", None), ("resp_x", "ann")]:
            error = refusal(lambda r=response_id, u=user: stored_response(r, u))
            assert (error.status, error.code) == (404, "not_found")
        error = refusal(lambda: previous_items("resp_ann", "bob"))
        assert error.param == "previous_response_id"


def test_globex_does_not_see_acmes_responses(acme: TenantFixture, globex: TenantFixture) -> None:
    with schema_context(acme.schema):
        kept("resp_acme")
    with schema_context(globex.schema):
        assert refusal(lambda: stored_response("resp_acme", "ann")).status == 404


def test_without_capture_nothing_of_the_content_is_kept(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        kept("resp_private", capture=False)
        row = StoredResponse.objects.get(response_id="resp_private")
        assert (row.content_stored, row.items, row.response) == (False, [], None)
        error = refusal(lambda: stored_response("resp_private", "ann"))
        assert (error.status, error.code) == (404, "response_not_stored")
        assert error.message == (
            "response resp_private was not stored: this tenant does not capture content"
        )


def test_retention_deletes_what_is_older_than_the_tenants_age(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        for name, days in [
            ("resp_new", 1),
            ("resp_week", 8),
            ("resp_old", DEFAULT_MAX_AGE_DAYS + 1),
        ]:
            kept(name)
            StoredResponse.objects.filter(response_id=name).update(
                created_at=timezone.now() - timedelta(days=days)
            )
        assert purge_responses(None) == 1
        assert purge_responses(7) == 1
        assert list(StoredResponse.objects.values_list("response_id", flat=True)) == ["resp_new"]
    acme.tenant.memory_max_age_days = 0
    acme.tenant.save()
    assert purge_stored_responses_task()[acme.schema] == 1
    with schema_context(acme.schema):
        assert not StoredResponse.objects.exists()


def test_a_responses_deployment_serves_openai_calls_translated(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    deployment = {
        "name": "resp",
        "protocol": "openai_responses",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-5",
    }
    created = acme_api.post("/api/v1/deployments", deployment)
    assert created.status_code == 201, created.content
    assert created.json()["protocol"] == "openai_responses"
    route = {"name": "r", "model": {"upstream": "resp"}, "context": {}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    with schema_context(acme.schema):
        _, (upstream,) = upstreams_for("r", "openai", responses=True)
        assert (upstream.protocol, upstream.wire) == ("openai", "openai_responses")
        _, (chat,) = upstreams_for("r", "openai", body={"messages": []})
        assert (chat.protocol, chat.wire) == ("openai", "openai_responses")
        asking = {"messages": [], "logprobs": True}
        error = refusal(lambda: upstreams_for("r", "openai", body=asking))
        mismatch = refusal(lambda: upstreams_for("r", "anthropic"))
    assert (error.status, error.code, error.param) == (400, "protocol_mismatch", "logprobs")
    assert "send the call to /v1/responses" in error.message
    assert (mismatch.status, mismatch.code) == (400, "protocol_mismatch")
    assert "send it to /v1/responses" in mismatch.message
    wrong = acme_api.post("/api/v1/deployments", {**deployment, "protocol": "responses"})
    assert wrong.status_code == 400
