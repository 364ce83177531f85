"""A variant's source secrets are kept as the route's own are: sealed at rest, shown as
``{"set": true}``, kept when a GET body is written back, and still sent when that arm runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Reply, Seen, Service, json_reply, outbound_allowlist, running_service

TOKEN = "Bearer variant-s3cret-value"


def answering_with_the_token(seen: Seen) -> Reply:
    if seen.headers.get("authorization") != TOKEN:
        return json_reply({"error": "unauthorized"}, status=401)
    return json_reply([{"id": "refunds", "title": "Refunds", "text": "VARIANT-DOC-TEXT"}])


@pytest.fixture
def service(acme: TenantFixture) -> Iterator[Service]:
    with running_service() as running, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        running.responder = answering_with_the_token
        yield running


def route(service: Service) -> dict[str, Any]:
    search = {
        "type": "rag",
        "name": "search",
        "backend": "external_api",
        "backend_config": {"endpoint": service.url("/search"), "headers": {"Authorization": TOKEN}},
        "match": {"recall": {"top_k": 5, "min_similarity": -1}},
        "timeout_ms": 10_000,
    }
    return {
        "name": "guarded-arms",
        "context": {"sources": []},
        "variants": [
            {
                "name": "searching",
                "weight": 1,
                "context": {"sources": [search], "injection": {"mode": "system_prompt"}},
            }
        ],
    }


def stored_text(schema: str) -> str:
    with schema_context(schema), connection.cursor() as cursor:
        cursor.execute("SELECT variants::text FROM routing_route WHERE name = 'guarded-arms'")
        return str(cursor.fetchone()[0])


def found(api: ApiClient) -> bool:
    body = {"messages": [{"role": "user", "content": "refund?"}]}
    response = api.post("/api/v1/resolve", {"route": "guarded-arms", "user": "u1", "request": body})
    assert response.status_code == 200, response.content
    assert response.headers["x-context-variant"] == "searching"
    return "VARIANT-DOC-TEXT" in str(response.json()["request"])


def test_a_variants_secret_is_sealed_hidden_and_kept_on_write_back(
    acme_api: ApiClient, acme: TenantFixture, service: Service
) -> None:
    created = acme_api.post("/api/v1/routes", route(service))
    assert created.status_code == 201, created.content
    assert TOKEN not in created.content.decode()
    assert TOKEN not in stored_text(acme.schema)
    assert found(acme_api)

    read = acme_api.get("/api/v1/routes/guarded-arms")
    (variant,) = read.json()["variants"]
    headers = variant["context"]["sources"][0]["backend_config"]["headers"]
    assert headers == {"Authorization": {"set": True}}
    exported = acme_api.get("/api/v1/routes/guarded-arms/export")
    assert TOKEN not in exported.content.decode()

    written_back = acme_api.put("/api/v1/routes/guarded-arms", read.json())
    assert written_back.status_code == 200, written_back.content
    assert TOKEN not in stored_text(acme.schema)
    assert found(acme_api)
