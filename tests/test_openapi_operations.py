"""The OpenAPI schema covers every endpoint of the REST API and the gateway, each operation under
one of the known tags with a readable, unique operation id (the rule of
``contextplatform/openapi_operations.py``). The endpoints are read from Django's URL resolver, so
a new path without its schema entry fails here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.views import View
from drf_spectacular.generators import SchemaGenerator

from contextplatform.openapi_operations import OPERATIONS, TAGS

OPERATION_ID = re.compile(r"^[a-z]+(?:[A-Z][a-z]*)+$")
DOCUMENTED = ("api/v1/", "v1/")
METHODS = ("get", "put", "post", "delete", "patch")
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")
# Served, but the schema documents them under another path: a route named "import" is read and
# written at /api/v1/routes/{name} like any other.
ELSEWHERE = {(method, "/api/v1/routes/import") for method in ("get", "put", "patch", "delete")}


def schema_document() -> dict[str, Any]:
    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(document, default=str))


def walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            yield route, entry.callback


def view_methods(callback: Any) -> set[str]:
    """The HTTP methods a view answers (HEAD and OPTIONS aside: no endpoint of its own)."""
    view_class: type[View] = getattr(callback, "cls", None) or callback.view_class
    return {method for method in METHODS if hasattr(view_class, method)}


def served_endpoints() -> set[tuple[str, str]]:
    endpoints = set()
    for route, callback in walk(get_resolver("contextplatform.urls").url_patterns):
        if not route.startswith(DOCUMENTED):
            continue
        path = "/" + PARAMETER.sub(r"{\1}", route)
        endpoints |= {(method, path) for method in view_methods(callback)}
    return endpoints


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return schema_document()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, entries in document["paths"].items():
        for method, operation in entries.items():
            if method in METHODS:
                yield method, path, operation


def test_every_endpoint_is_in_the_schema(document: dict[str, Any]) -> None:
    served = served_endpoints()
    assert ("post", "/v1/chat/completions") in served  # the walk sees the gateway
    assert ("get", "/api/v1/routes/{name}") in served
    documented = {(method, path) for method, path, _ in operations(document)}
    assert served - ELSEWHERE - documented == set()
    assert documented - served == set()


def test_every_operation_is_tagged_and_named_by_the_rule(document: dict[str, Any]) -> None:
    ids = []
    for method, path, operation in operations(document):
        assert operation.get("tags") and len(operation["tags"]) == 1, (method, path)
        assert operation["tags"][0] in TAGS, (method, path, operation["tags"])
        assert OPERATION_ID.match(operation["operationId"]), (method, path, operation)
        ids.append(operation["operationId"])
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert len(set(OPERATIONS.values())) == len(OPERATIONS)
    # Every tag groups something, listed in the schema in the table's order.
    assert [tag["name"] for tag in document["tags"]] == list(TAGS)
    used = {operation["tags"][0] for _, _, operation in operations(document)}
    assert used == set(TAGS)


def test_the_rule_refuses_generated_names() -> None:
    for generated in ("v1_routes_retrieve_2", "memories_list", "getRoute2", "listroutes"):
        assert not OPERATION_ID.match(generated), generated
    assert OPERATION_ID.match("listMcpServers")


def test_the_gateway_is_described(document: dict[str, Any]) -> None:
    chat = document["paths"]["/v1/chat/completions"]["post"]
    assert chat["operationId"] == "createChatCompletion"
    assert {p["name"] for p in chat["parameters"]} >= {
        "x-route",
        "x-user-id",
        "x-session-id",
        "x-memory-store",
    }
    assert "x-context-resolve-id" in chat["responses"]["200"]["headers"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "messages", "stream"} <= set(body["properties"])
    # The provider's error shape, not the REST envelope.
    error = chat["responses"]["404"]["content"]["application/json"]["schema"]
    assert set(error["properties"]["error"]["properties"]) >= {"message", "type", "code"}
    messages = document["paths"]["/v1/messages"]["post"]
    assert messages["responses"]["400"]["content"]["application/json"]["schema"]["properties"][
        "type"
    ] == {"type": "string", "enum": ["error"]}
    # Either of the key's headers.
    assert chat["security"] == [{"ApiKeyBearer": []}, {"ApiKeyHeader": []}]
    schemes = document["components"]["securitySchemes"]
    assert schemes["ApiKeyBearer"]["scheme"] == "bearer"
    assert schemes["ApiKeyHeader"]["name"] == "X-Api-Key"
    assert document["paths"]["/v1/models"]["get"]["operationId"] == "listModels"
    model = document["paths"]["/v1/models/{model}"]["get"]
    assert model["operationId"] == "getModel" and "404" in model["responses"]
    count = document["paths"]["/v1/messages/count_tokens"]["post"]
    assert count["operationId"] == "countMessageTokens"
    answer = count["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["properties"] == {"input_tokens": {"type": "integer"}}
    assert count["responses"]["404"]["content"]["application/json"]["schema"]["description"] == (
        "Anthropic's error shape"
    )


def test_swagger_ui_shows_each_operation_id(db: Any) -> None:
    """Swagger UI groups operations by their tag (the schema's ``tags`` give the order) and, set
    so, shows each one's id beside its path."""
    from django.test import Client

    page = Client().get("/api/docs/").content.decode()
    settings = json.loads(re.search(r"const swaggerSettings = (\{.*?\});", page, re.S)[1])
    assert settings["displayOperationId"] is True
