"""Header values are write-only secrets wherever a tenant writes them: an ``external_api`` rag
backend's headers, a ``realtime_apis`` connector's and a deployment's. The database holds them
encrypted, no representation (GET, export, the admin's pages) shows them, a GET body written back
keeps them, and the sources still send them: a loopback service answers only when they arrive.
Values stored in plain text before are still sent, and sealed by the migration and by
``rotate_source_secrets``. A deployment refuses every header a provider reads its key from."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from contextplatform.core.config_cache import changed
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import upstream_of
from contextplatform.gateway.forward import upstream_headers
from contextplatform.routes.models import Route
from contextplatform.routes.selectors import ROUTES
from tests.admin.conftest import admin_client_for  # noqa: F401  (the fixture)
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Reply, Seen, Service, json_reply, outbound_allowlist, running_service

CREDENTIALS = {"Authorization": "Bearer s3cret-header-value", "X-Goog-Api-Key": "g00g-header-key"}
PLAIN = list(CREDENTIALS.values())
SHOWN = {name: {"set": True} for name in CREDENTIALS}


def answering_with_credentials(seen: Seen) -> Reply:
    """The search hits or the balance, only for a request that carries both credentials."""
    if any(seen.headers.get(name.lower()) != value for name, value in CREDENTIALS.items()):
        return json_reply({"error": "unauthorized"}, status=401)
    if seen.path.startswith("/search"):
        return json_reply([{"id": "refunds", "title": "Refunds", "text": "REFUND-DOC-TEXT"}])
    return json_reply({"balance": "BALANCE-42"})


@pytest.fixture
def service(acme: TenantFixture) -> Iterator[Service]:
    with running_service() as running, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        running.responder = answering_with_credentials
        yield running


def route(service: Service) -> dict[str, Any]:
    return {
        "name": "guarded",
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "search",
                    "backend": "external_api",
                    "backend_config": {"endpoint": service.url("/search"), "headers": CREDENTIALS},
                    "match": {"recall": {"top_k": 5, "min_similarity": -1}},
                    "timeout_ms": 10_000,
                },
                {
                    "type": "realtime_apis",
                    "name": "live",
                    "timeout_ms": 10_000,
                    "connectors": [
                        {
                            "name": "balance",
                            "url": service.url("/balance"),
                            "headers": {**CREDENTIALS, "X-User": "{user}"},
                            "select": "$.balance",
                        }
                    ],
                },
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def answered_with_both(api: ApiClient) -> bool:
    """Whether a resolve got the search hit and the balance (each sent with its credentials)."""
    response = api.post(
        "/api/v1/resolve",
        {
            "route": "guarded",
            "user": "u_1",
            "request": {"messages": [{"role": "user", "content": "refund and balance?"}]},
        },
    )
    assert response.status_code == 200, response.content
    system = response.json()["request"]["messages"][0]["content"]
    return "REFUND-DOC-TEXT" in system and "BALANCE-42" in system


def raw_text(schema: str, table: str) -> str:
    """Every row of ``table`` as the database holds it, as text."""
    with schema_context(schema), connection.cursor() as cursor:
        cursor.execute(f"SELECT row_to_json(t)::text FROM {table} t")
        return "\n".join(row[0] for row in cursor.fetchall())


def shows_none(text: str) -> bool:
    return not any(value in text for value in PLAIN)


def test_source_headers_are_sealed_hidden_kept_on_write_back_and_still_sent(
    acme_api: ApiClient,
    acme: TenantFixture,
    service: Service,
    admin_client_for: Callable[[str], Client],  # noqa: F811
) -> None:
    created = acme_api.post("/api/v1/routes", route(service))
    assert created.status_code == 201, created.content
    assert shows_none(created.content.decode())
    assert shows_none(raw_text(acme.schema, "routing_route"))
    assert answered_with_both(acme_api)

    read = acme_api.get("/api/v1/routes/guarded")
    sources = read.json()["context"]["sources"]
    assert sources[0]["backend_config"]["headers"] == SHOWN
    assert sources[1]["connectors"][0]["headers"] == {**SHOWN, "X-User": {"set": True}}
    assert shows_none(read.content.decode())
    exported = acme_api.get("/api/v1/routes/guarded/export")
    assert exported.status_code == 200
    assert "X-Goog-Api-Key" in exported.content.decode()
    assert shows_none(exported.content.decode())
    with schema_context(acme.schema):
        pk = Route.objects.get(name="guarded").pk
    page = admin_client_for("superuser").get(reverse("admin:routing_route_change", args=[pk]))
    assert page.status_code == 200
    assert shows_none(page.content.decode())

    service.requests.clear()
    written_back = acme_api.put("/api/v1/routes/guarded", read.json())
    assert written_back.status_code == 200, written_back.content
    assert shows_none(raw_text(acme.schema, "routing_route"))
    assert answered_with_both(acme_api)
    assert {seen.headers.get("x-user") for seen in service.requests if "balance" in seen.path} == {
        "u_1"
    }


def stored_in_plain_text(schema: str, context: dict[str, Any]) -> None:
    """The route's row as it was stored before header values were secrets."""
    with schema_context(schema):
        Route.objects.filter(name="guarded").update(context=context)
        changed(ROUTES)  # an update() sends no signal: the kept specs are dropped here
    assert not shows_none(raw_text(schema, "routing_route"))


def test_header_values_stored_in_plain_text_are_still_sent_and_then_sealed(
    acme_api: ApiClient, acme: TenantFixture, service: Service
) -> None:
    written = route(service)
    assert acme_api.post("/api/v1/routes", written).status_code == 201
    migration = importlib.import_module(
        "contextplatform.routes.migrations.0006_seal_source_header_values"
    )
    for seal in (
        lambda: migration.seal_plain_header_values(apps, None),
        lambda: call_command("rotate_source_secrets", verbosity=0),
    ):
        stored_in_plain_text(acme.schema, written["context"])
        assert answered_with_both(acme_api)
        read = acme_api.get("/api/v1/routes/guarded")
        assert read.json()["context"]["sources"][0]["backend_config"]["headers"] == SHOWN
        assert shows_none(read.content.decode())
        with schema_context(acme.schema):
            seal()
            changed(ROUTES)
        assert shows_none(raw_text(acme.schema, "routing_route"))
        assert answered_with_both(acme_api)


DEPLOYMENT_HEADERS = {"Helicone-Auth": "Bearer s3cret-header-value", "X-Org": "g00g-header-key"}


def deployment() -> dict[str, Any]:
    return {
        "name": "gpt",
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        "api_key": "sk-deployment-key-0123456789",
        "headers": DEPLOYMENT_HEADERS,
    }


def sent_to_upstream(schema: str) -> dict[str, str]:
    """The headers the gateway sends the deployment's upstream."""
    with schema_context(schema):
        return upstream_headers(upstream_of(Deployment.objects.get(name="gpt")), {})


def test_deployment_headers_are_sealed_hidden_and_kept_on_write_back(
    acme_api: ApiClient,
    acme: TenantFixture,
    admin_client_for: Callable[[str], Client],  # noqa: F811
) -> None:
    created = acme_api.post("/api/v1/deployments", deployment())
    assert created.status_code == 201, created.content
    assert created.json()["headers_set"] == ["Helicone-Auth", "X-Org"]
    assert shows_none(raw_text(acme.schema, "deployments_deployment"))
    read = acme_api.get("/api/v1/deployments/gpt")
    assert "headers" not in read.json()
    assert shows_none(read.content.decode())
    with schema_context(acme.schema):
        pk = Deployment.objects.get(name="gpt").pk
    operator = admin_client_for("superuser")
    change = operator.get(reverse("admin:deployments_deployment_change", args=[pk]))
    listing = operator.get(reverse("admin:deployments_deployment_changelist"))
    assert (change.status_code, listing.status_code) == (200, 200)
    assert "Helicone-Auth, X-Org" in change.content.decode()  # the names, as stored
    assert shows_none(change.content.decode()) and shows_none(listing.content.decode())

    assert acme_api.put("/api/v1/deployments/gpt", read.json()).status_code == 200
    assert acme_api.patch("/api/v1/deployments/gpt", {"timeout_ms": 5000}).status_code == 200
    sent = sent_to_upstream(acme.schema)
    assert {name: sent[name] for name in DEPLOYMENT_HEADERS} == DEPLOYMENT_HEADERS
    assert sent["authorization"] == "Bearer sk-deployment-key-0123456789"
    assert shows_none(raw_text(acme.schema, "deployments_deployment"))
    assert "s3cret" not in repr(upstream_of_named(acme.schema))

    cleared = acme_api.patch("/api/v1/deployments/gpt", {"headers": None})
    assert cleared.json()["headers_set"] == []
    assert "Helicone-Auth" not in sent_to_upstream(acme.schema)


def upstream_of_named(schema: str) -> Any:
    with schema_context(schema):
        return upstream_of(Deployment.objects.get(name="gpt"))


@pytest.mark.parametrize(
    "name",
    [
        "X-Goog-Api-Key",
        "x-goog-api-key",
        "Authorization",
        "X-Api-Key",
        "api-key",
        "Ocp-Apim-Subscription-Key",
    ],
)
def test_a_deployment_refuses_headers_a_provider_reads_its_key_from(
    acme_api: ApiClient, name: str
) -> None:
    response = acme_api.post("/api/v1/deployments", {**deployment(), "headers": {name: "k"}})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"] == "headers"
    assert "the key goes in api_key" in error["message"]


def test_the_migration_encrypts_the_header_values_deployments_stored_in_plain_text(
    acme: TenantFixture,
) -> None:
    """The row as an earlier version stored it (a plain ``headers`` column), through the data
    step of deployments 0003: the values become tokens that decrypt to them."""
    migration = importlib.import_module(
        "contextplatform.deployments.migrations.0003_headers_encrypted"
    )
    loader = MigrationLoader(connection)
    state = loader.project_state(("deployments", "0002_calibration"))
    for operation in migration.Migration.operations[:1]:  # headers_encrypted added
        operation.state_forwards("deployments", state)
    with schema_context(acme.schema), connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE deployments_deployment ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'"
        )
        # Columns added after 0003 are unknown to the historical model: they take their default.
        cursor.execute("ALTER TABLE deployments_deployment ALTER COLUMN limits SET DEFAULT '{}'")
        try:
            historical = state.apps.get_model("deployments", "Deployment")
            historical.objects.create(
                name="old",
                protocol="openai",
                base_url="https://api.openai.com/v1",
                model="m",
                headers=DEPLOYMENT_HEADERS,
            )
            migration.encrypt_headers(state.apps, None)
            row = raw_text(acme.schema, "deployments_deployment")
            assert "Helicone-Auth" in row
            deployment = Deployment.objects.get(name="old")
            assert upstream_of(deployment).headers == DEPLOYMENT_HEADERS
            assert set(deployment.headers_encrypted) == set(DEPLOYMENT_HEADERS)
            assert not any(
                value in str(deployment.headers_encrypted) for value in DEPLOYMENT_HEADERS.values()
            )
        finally:
            Deployment.objects.filter(name="old").delete()
            cursor.execute("ALTER TABLE deployments_deployment DROP COLUMN headers")
