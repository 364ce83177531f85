"""The per-key request rate limit (``API_RATE_LIMIT_PER_MINUTE``): one count per key across the
gateway and ``POST /api/v1/resolve``, 429 with ``Retry-After`` in the provider's shape on
``/v1/`` (the official clients raise ``RateLimitError``) and in the envelope on ``/api/``.

Each test issues a key of its own, so no other request of the run shares its window."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from django_tenants.utils import get_public_schema_name, schema_context

from tenants.models import ApiKey, Tenant
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture
from tests.gateway.conftest import Gateway
from tests.live import live_server
from tests.upstream import LoopbackUpstream

LIMIT = 3


def resolve_body(route: str) -> dict[str, Any]:
    return {"route": route, "request": {"messages": [{"role": "user", "content": "hello"}]}}


def assert_retry_after(headers: Any) -> None:
    retry_after = int(headers["retry-after"])
    assert 1 <= retry_after <= 60


# --- POST /api/v1/resolve in process ------------------------------------------------------------


def test_resolve_answers_429_in_the_envelope_over_the_limit(
    acme: TenantFixture, settings: Any
) -> None:
    settings.API_RATE_LIMIT_PER_MINUTE = 2
    issued = issue_api_key(tenant=acme.tenant, scopes=["resolve"], name="limited")
    api = ApiClient(issued.plain_key)
    route = {"name": "limited", "context": {"sources": []}}
    assert ApiClient(acme.key).post("/api/v1/routes", route).status_code == 201

    for _ in range(2):
        assert api.post("/api/v1/resolve", resolve_body("limited")).status_code == 200
    refused = api.post("/api/v1/resolve", resolve_body("limited"))

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "2 requests a minute" in refused.json()["error"]["message"]
    assert_retry_after(refused.headers)
    # Another key of the same tenant has a window of its own.
    assert ApiClient(acme.key).post("/api/v1/resolve", resolve_body("limited")).status_code == 200


def test_no_limit_by_default(acme: TenantFixture) -> None:
    api = ApiClient(acme.key)
    assert api.post("/api/v1/routes", {"name": "free", "context": {}}).status_code == 201
    for _ in range(5):
        assert api.post("/api/v1/resolve", resolve_body("free")).status_code == 200


# --- the gateway, on a live server started with a limit -----------------------------------------


@dataclass(frozen=True)
class Limited:
    server: str
    key: str


@pytest.fixture
def limited(gateway: Gateway, django_db_blocker: Any) -> Iterator[Limited]:
    """A second live server with ``API_RATE_LIMIT_PER_MINUTE``, and a fresh key (committed: the
    server is another process), revoked after."""
    with django_db_blocker.unblock(), schema_context(get_public_schema_name()):
        tenant = Tenant.objects.get(schema_name="acme")
        issued = issue_api_key(tenant=tenant, scopes=["resolve"], name=f"rl-{uuid.uuid4().hex}")
    try:
        with live_server(env={"API_RATE_LIMIT_PER_MINUTE": str(LIMIT)}) as server:
            yield Limited(server=server, key=issued.plain_key)
    finally:
        with django_db_blocker.unblock(), schema_context(get_public_schema_name()):
            ApiKey.objects.filter(pk=issued.api_key.pk).delete()


def test_the_gateway_and_resolve_share_one_count_per_key(
    gateway: Gateway, upstream: LoopbackUpstream, limited: Limited
) -> None:
    client = openai.OpenAI(base_url=f"{limited.server}/v1", api_key=limited.key, max_retries=0)
    messages: Any = [{"role": "user", "content": "hello"}]
    for _ in range(LIMIT):
        completion = client.chat.completions.create(model=gateway.openai_route, messages=messages)
        assert completion.choices[0].message.content
    hits = upstream.hits

    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=gateway.openai_route, messages=messages)
    assert refused.value.status_code == 429
    assert refused.value.body["code"] == "rate_limited"
    assert_retry_after(refused.value.response.headers)

    claude = anthropic.Anthropic(base_url=limited.server, api_key=limited.key, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as refused_too:
        claude.messages.create(model=gateway.anthropic_route, max_tokens=50, messages=messages)
    assert refused_too.value.body["error"]["type"] == "rate_limit_error"
    assert_retry_after(refused_too.value.response.headers)

    with httpx.Client(base_url=limited.server, timeout=30) as api:
        resolved = api.post(
            "/api/v1/resolve",
            json=resolve_body(gateway.openai_route),
            headers={"Authorization": f"Bearer {limited.key}"},
        )
    assert resolved.status_code == 429
    assert resolved.json()["error"]["code"] == "rate_limited"
    assert_retry_after(resolved.headers)
    assert upstream.hits == hits  # nothing refused reached the upstream

    # The platform's other key is counted on its own.
    other = openai.OpenAI(base_url=f"{limited.server}/v1", api_key=gateway.key, max_retries=0)
    assert other.chat.completions.create(model=gateway.openai_route, messages=messages).choices
