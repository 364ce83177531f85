"""The table of bad inputs, generated from the OpenAPI schema the API serves (drf-spectacular's
``SchemaGenerator``, as ``tests/core/test_openapi_conformance.py`` loads it): for every operation,
every string field of its request body (keys of free-form objects too), every path parameter and
every string query parameter, a NUL character, a lone surrogate (the JSON escape ``\\ud800``, in
bodies: a URL cannot carry one) and a 10,000-character value. Each is its own test: the answer is
never a server error, a refusal is in the envelope, a NUL or a surrogate is a 400 naming the field,
and a refused request writes nothing. The gateway's two bodies and its headers are in the table
too (the malformed provider bodies of the issue: ``test_bad_input_faults.py``).

A body is the smallest one the schema allows around the bad value (its required members filled
with plain values), so a NUL or a surrogate is refused for itself, not for a missing member."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.reliability.bad_input import (
    LONG,
    NUL,
    GatewayRoutes,
    envelope_error,
    provider_error,
    row_counts,
)
from tests.reliability.test_bad_input_faults import PATHS

SURROGATE = "\ud800"  # sent as the JSON escape: json.dumps writes it so
BAD_TEXT = {"nul": NUL, "surrogate": SURROGATE, "long": LONG}
SAYS = {"nul": "contains a NUL character", "surrogate": "contains an unpaired surrogate"}
MAX_DEPTH = 8  # how deep the schema is followed (a route's sources are nested a few levels)


def served_schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    loaded: dict[str, Any] = json.loads(json.dumps(document, default=str))
    return loaded


SCHEMA = served_schema()
COMPONENTS: dict[str, Any] = SCHEMA["components"]["schemas"]


def resolved(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = COMPONENTS[node["$ref"].rsplit("/", 1)[1]]
    return node


def branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The members of a union (nullable fields are one), else the node itself."""
    node = resolved(node)
    members = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
    if members:
        return [b for m in members for b in branches(m) if b.get("type") != "null"]
    return [node]


def filled(node: dict[str, Any], depth: int = 0) -> Any:
    """A plain value the schema takes at ``node`` (for required members around the bad one)."""
    node = branches(node)[0]
    if "enum" in node:
        return node["enum"][0]
    if "default" in node and node["default"] is not None:
        return node["default"]
    kind = node.get("type")
    if kind == "string":
        return "x" * max(1, node.get("minLength", 1))
    if kind == "integer":
        return max(1, node.get("minimum", 1))
    if kind == "number":
        return node.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        count = node.get("minItems", 0)
        return [filled(node.get("items", {}), depth + 1) for _ in range(count)] if depth < 6 else []
    if kind == "object" or "properties" in node:
        props = node.get("properties", {})
        if depth >= 6:
            return {}
        return {
            name: filled(props[name], depth + 1)
            for name in node.get("required", [])
            if name in props
        }
    return "x"


@dataclass(frozen=True)
class Spot:
    """Where a string sits in a body: its path as the API names it, and how to build the body."""

    path: str
    steps: tuple[tuple[Any, ...], ...]  # ("key", name, object schema) / ("item", array schema)
    max_length: int | None = None
    is_key: bool = False


def spots(
    node: dict[str, Any], path: str = "", steps: tuple[Any, ...] = (), depth: int = 0
) -> Iterator[Spot]:
    """Every string of a request body's schema, with the way to it."""
    if depth > MAX_DEPTH:
        return
    seen: set[str] = set()
    for branch in branches(node):
        kind = branch.get("type")
        if kind == "string":
            if "string" not in seen:
                seen.add("string")
                yield Spot(path, steps, branch.get("maxLength"))
        elif kind == "array":
            if "array" not in seen:
                seen.add("array")
                yield from spots(
                    branch.get("items", {}), f"{path}[0]", (*steps, ("item", branch)), depth + 1
                )
        elif kind == "object" or "properties" in branch or "additionalProperties" in branch:
            if "object" in seen:
                continue
            seen.add("object")
            for name, member in branch.get("properties", {}).items():
                sub = f"{path}.{name}" if path else name
                yield from spots(member, sub, (*steps, ("key", name, branch)), depth + 1)
            extra = branch.get("additionalProperties")
            if extra is not None and extra is not False and not branch.get("properties"):
                # A free-form object: a key of its own, and a string under it.
                yield Spot(path, (*steps, ("free", branch)), None, is_key=True)
                sub = f"{path}.k" if path else "k"
                yield Spot(sub, (*steps, ("key", "k", branch)), None)


def body_with(spot: Spot, value: str) -> Any:
    """The smallest body with ``value`` at ``spot`` (the required members around it filled)."""

    def build(index: int) -> Any:
        if index == len(spot.steps):
            return value
        step = spot.steps[index]
        if step[0] == "item":
            return [build(index + 1)]
        if step[0] == "free":
            return {value: "x"}
        _, name, schema = step
        around = filled(schema)
        around = around if isinstance(around, dict) else {}
        return {**around, name: build(index + 1)}

    return build(0)


@dataclass(frozen=True)
class Case:
    method: str
    template: str
    where: str  # "body", "path" or "query"
    param: str | None
    bad: str  # a key of BAD_TEXT
    body: Any = None
    path_values: tuple[tuple[str, str], ...] = ()
    query: tuple[tuple[str, str], ...] = ()
    max_length: int | None = None

    @property
    def id(self) -> str:
        return f"{self.method} {self.template} {self.where}:{self.param or '(key)'} {self.bad}"

    def url(self) -> str:
        path = self.template
        for name, value in self.path_values:
            path = path.replace("{" + name + "}", quote(value, safe=""))
        return path


def plain_path_values(parameters: list[dict[str, Any]]) -> dict[str, str]:
    return {
        p["name"]: ("1" if p.get("schema", {}).get("type") == "integer" else "x")
        for p in parameters
        if p["in"] == "path"
    }


def cases() -> Iterator[Case]:
    """Every REST API operation of the schema; the gateway's (``/v1/``) answer in the providers'
    shapes and are driven below, against routes that reach a loopback model."""
    for template, operations in SCHEMA["paths"].items():
        if not template.startswith("/api/"):
            continue
        for method, operation in operations.items():
            method = method.upper()
            parameters = operation.get("parameters", [])
            plain = plain_path_values(parameters)
            content = operation.get("requestBody", {}).get("content", {})
            json_body = next(
                (c["schema"] for t, c in content.items() if t != "application/yaml"), None
            )
            base_body = filled(json_body) if json_body is not None else None
            for parameter in parameters:
                if parameter.get("schema", {}).get("type") not in (None, "string"):
                    continue
                name = parameter["name"]
                for bad in ("nul", "long"):
                    if parameter["in"] == "path":
                        values = {**plain, name: BAD_TEXT[bad]}
                        yield Case(
                            method, template, "path", name, bad, base_body, tuple(values.items())
                        )
                    elif parameter["in"] == "query":
                        query = ((name, BAD_TEXT[bad]),)
                        yield Case(
                            method,
                            template,
                            "query",
                            name,
                            bad,
                            base_body,
                            tuple(plain.items()),
                            query,
                        )
            if json_body is None:
                continue
            for spot in spots(json_body):
                for bad, value in BAD_TEXT.items():
                    if spot.is_key and bad == "long":
                        continue
                    yield Case(
                        method,
                        template,
                        "body",
                        spot.path or None,
                        bad,
                        body_with(spot, value),
                        tuple(plain.items()),
                        max_length=spot.max_length,
                    )


CASES = {case.id: case for case in cases()}


def sent(api: ApiClient, case: Case) -> Any:
    body = None if case.method in ("GET", "DELETE") else case.body
    url = case.url()
    key_id = getattr(api, "table_key_id", None)
    if key_id is not None and url.startswith(KEYS_PLAIN):
        # A key's id is the platform's ("key_<n>"), not a name the table can choose: the key
        # the fixture made stands for it, so a body reaches its validation.
        url = "/api/v1/keys/" + key_id + url[len(KEYS_PLAIN) :]
    return api.send(case.method, url + query_string(case), body)


KEYS_PLAIN = "/api/v1/keys/x"


def query_string(case: Case) -> str:
    return ("?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in case.query)) if case.query else ""


@pytest.fixture
def table_api(acme_api: ApiClient) -> ApiClient:
    """acme with a route, a collection, a deployment and an MCP server named ``x`` (the plain
    value of every name), so a replacement reaches its body."""
    existing = [
        ("/api/v1/routes", {"name": "x", "context": {"sources": []}}),
        ("/api/v1/collections", {"name": "x"}),
        (
            "/api/v1/deployments",
            {
                "name": "x",
                "protocol": "openai",
                "base_url": "https://api.openai.com/v1",
                "model": "m",
            },
        ),
        ("/api/v1/mcp-servers", {"name": "x", "url": "https://mcp.example.com/mcp"}),
    ]
    for path, body in existing:
        response = acme_api.post(path, body)
        assert response.status_code == 201, response.content
    key = acme_api.post("/api/v1/keys", {"name": "x", "scopes": ["resolve"]})
    assert key.status_code == 201, key.content
    acme_api.table_key_id = key.json()["id"]  # type: ignore[attr-defined]
    return acme_api


@pytest.mark.parametrize("case_id", list(CASES))
def test_bad_text_is_refused_never_a_server_error(
    table_api: ApiClient, acme: TenantFixture, case_id: str
) -> None:
    case = CASES[case_id]
    before = row_counts(acme.schema)
    response = sent(table_api, case)
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        error = envelope_error(response)
        assert row_counts(acme.schema) == before, "a refused request wrote"
    if case.where == "query" and case.param == "format" and response.status_code == 404:
        return  # DRF's content negotiation refuses a format it has no renderer for, first
    if case.bad in SAYS:
        assert response.status_code == 400, response.content
        assert SAYS[case.bad] in error["message"], error
        assert error["param"] == case.param, error
    elif case.where == "path" or (case.max_length is not None and case.max_length < len(LONG)):
        assert response.status_code == 400, response.content


# --- the gateway ----------------------------------------------------------------------------------

GATEWAY_SPOTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # protocol: [(the field named, a body with BAD where the string goes)]
    "openai": [
        ("model", {"model": "BAD", "messages": [{"role": "user", "content": "hi"}]}),
        ("user", {"user": "BAD", "messages": [{"role": "user", "content": "hi"}]}),
        ("messages[0].content", {"messages": [{"role": "user", "content": "BAD"}]}),
        (
            "messages[0].content[0].text",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "BAD"}]}]},
        ),
        ("messages[0].name", {"messages": [{"role": "user", "content": "hi", "name": "BAD"}]}),
        ("stop", {"stop": "BAD", "messages": [{"role": "user", "content": "hi"}]}),
        (
            "messages[1].tool_calls[0].function.arguments",
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "BAD"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "r"},
                ]
            },
        ),
    ],
    "anthropic": [
        ("system", {"system": "BAD", "messages": [{"role": "user", "content": "hi"}]}),
        (
            "system[0].text",
            {
                "system": [{"type": "text", "text": "BAD"}],
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
        ("messages[0].content", {"messages": [{"role": "user", "content": "BAD"}]}),
        (
            "messages[0].content[0].text",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "BAD"}]}]},
        ),
        (
            "metadata.user_id",
            {"metadata": {"user_id": "BAD"}, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
}


def planted(body: Any, value: str) -> Any:
    if body == "BAD":
        return value
    if isinstance(body, dict):
        return {k: planted(v, value) for k, v in body.items()}
    if isinstance(body, list):
        return [planted(v, value) for v in body]
    return body


GATEWAY_CASES = {
    f"{protocol} {param} {bad}": (protocol, param, bad, body)
    for protocol, rows in GATEWAY_SPOTS.items()
    for param, body in rows
    for bad in ("nul", "surrogate")
}


@pytest.mark.parametrize("case_id", list(GATEWAY_CASES))
def test_bad_text_in_a_gateway_body_is_refused_in_the_providers_shape(
    acme_api: ApiClient, acme: TenantFixture, gateway_routes: GatewayRoutes, case_id: str
) -> None:
    protocol, param, bad, body = GATEWAY_CASES[case_id]
    body = planted(body, BAD_TEXT[bad])
    body.setdefault("model", gateway_routes.names[protocol])
    body.setdefault("max_tokens", 64)
    before = row_counts(acme.schema)
    response = acme_api.post(PATHS[protocol], body)
    assert response.status_code == 400, response.content
    error = provider_error(response, protocol)
    assert error["message"] == f"{param}: {SAYS[bad]}", error
    if protocol == "openai":
        assert error["param"] == param, error
    assert gateway_routes.upstream.hits == 0
    assert row_counts(acme.schema) == before


@pytest.mark.parametrize("header", ["x-route", "x-user-id", "x-session-id"])
def test_bad_text_in_a_gateway_header_is_refused(
    acme_api: ApiClient, gateway_routes: GatewayRoutes, header: str
) -> None:
    body = {
        "model": gateway_routes.names["openai"],
        "messages": [{"role": "user", "content": "hi"}],
    }
    for value, says in ((NUL, SAYS["nul"]), (LONG, "at most")):
        response = acme_api.post(PATHS["openai"], body, headers={header: value})
        assert response.status_code == 400, response.content
        error = provider_error(response, "openai")
        assert error["param"] == header and says in error["message"], error
    assert gateway_routes.upstream.hits == 0
