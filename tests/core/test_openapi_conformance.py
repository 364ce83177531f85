"""The OpenAPI schema validates every response the API sends: schemathesis generates requests for
every operation of ``/api/schema/`` and checks each response's status, content type and body
against what the schema documents (the error envelope under every error status included), on the
live application (Django's WSGI handler, real PostgreSQL, the acme tenant's key)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from contextplatform.core.openapi import exclusive_bounds_as_openapi30
from tests.conftest import TenantFixture

# Bad input gets a clear error, never a 500: not_a_server_error holds every generated call to it.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def schema_document() -> dict[str, Any]:
    """The schema ``/api/schema/`` serves, generated from the URL conf (no database), as JSON."""
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(document, default=str))


def served_schema() -> Any:
    """The schema ``/api/schema/`` serves, run against Django's WSGI handler in this process."""
    loaded = schemathesis.openapi.from_dict(schema_document())
    loaded.app = get_wsgi_application()
    return loaded


schema = served_schema()


@contextmanager
def in_the_test_transaction() -> Iterator[None]:
    """As Django's test Client does around its requests: the WSGI handler must not close the test
    transaction's connection."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_response_matches_the_schema(case: Any, acme: TenantFixture) -> None:
    with in_the_test_transaction():
        case.call_and_validate(headers={"Authorization": f"Bearer {acme.key}"}, checks=CHECKS)


# Calls that read what exists (generated names rarely do): each success response validates too.
EXISTING = [
    ("GET", "/api/v1/routes/{name}", {"name": "support"}, None),
    ("GET", "/api/v1/routes/{name}/export", {"name": "support"}, {"format": "json"}),
    ("GET", "/api/v1/routes/{name}/export", {"name": "support"}, {"format": "yaml"}),
    ("GET", "/api/v1/routes/{name}/export", {"name": "support"}, None),
    ("GET", "/api/v1/deployments/{name}", {"name": "claude"}, None),
    ("GET", "/api/v1/users/{user}/memories/export", {"user": "u_1"}, None),
    ("GET", "/api/v1/users/{user}/profile", {"user": "u_1"}, None),
]


def test_responses_about_existing_resources_match_the_schema(acme: TenantFixture) -> None:
    from tests.conftest import ApiClient

    api = ApiClient(acme.key)
    deployment = {
        "name": "claude",
        "protocol": "anthropic",
        "base_url": "https://api.anthropic.com",
        "model": "claude-sonnet-4-5",
    }
    assert api.post("/api/v1/deployments", deployment).status_code == 201
    route = {"name": "support", "model": {"upstream": "claude"}, "context": {"sources": []}}
    assert api.post("/api/v1/routes", route).status_code == 201
    assert api.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "gold"}}).status_code == 200
    headers = {"Authorization": f"Bearer {acme.key}"}
    for method, path, parameters, query in EXISTING:
        case = schema[path][method].Case(path_parameters=parameters, query=query)
        with in_the_test_transaction():
            response = case.call_and_validate(headers=headers, checks=CHECKS)
        assert response.status_code == 200, (method, path, query, response.text)


def numeric_exclusive_bounds(node: Any, where: str = "#") -> list[str]:
    """Where the document spells an exclusive bound as a number (JSON Schema 2020-12), which an
    OpenAPI 3.0 reader cannot take."""
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in numeric_exclusive_bounds(item, where)]
    if not isinstance(node, dict):
        return []
    found = [
        f"{where}/{keyword}"
        for keyword in ("exclusiveMinimum", "exclusiveMaximum")
        if keyword in node and not isinstance(node[keyword], bool)
    ]
    for key, child in node.items():
        found += numeric_exclusive_bounds(child, f"{where}/{key}")
    return found


def test_the_route_body_is_described_in_openapi_30_terms() -> None:
    document = schema_document()
    assert document["openapi"].startswith("3.0")
    assert numeric_exclusive_bounds(document) == []
    components = document["components"]["schemas"]
    route = components["RouteSpec"]["properties"]
    assert route["variants"]["items"] == {"$ref": "#/components/schemas/VariantSpec"}
    weight = components["VariantSpec"]["properties"]["weight"]
    assert (weight["minimum"], weight["exclusiveMinimum"], weight["maximum"]) == (0, True, 1)
    assert components["VariantSpec"]["properties"]["context"] == {
        "$ref": "#/components/schemas/ContextConfig"
    }
    upstream = components["ModelSettings"]["properties"]["upstream"]["anyOf"]
    assert {"type": "string"} in upstream
    assert {"type": "array", "items": {"type": "string"}} in upstream


def test_a_tighter_inclusive_bound_wins_over_the_exclusive_one() -> None:
    document = {
        "a": {"type": "number", "exclusiveMinimum": 0, "minimum": 2, "exclusiveMaximum": 10},
        "b": {"type": "integer", "exclusiveMinimum": 5, "minimum": 1, "exclusiveMaximum": True},
    }
    assert exclusive_bounds_as_openapi30(document) == {
        "a": {"type": "number", "minimum": 2, "maximum": 10, "exclusiveMaximum": True},
        "b": {"type": "integer", "exclusiveMinimum": True, "minimum": 5, "exclusiveMaximum": True},
    }
