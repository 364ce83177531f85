"""Numbers and nesting at the boundary, through the real API on real PostgreSQL.

A number that jsonb and the renderer do not both round-trip (an integer past ±(2^63 - 1), NaN, an
infinity, ``1e20``: jsonb keeps it as ``numeric`` and gives back an integer past the 64 bits
orjson writes) is refused on every write path with a 400 naming the field, and nothing is stored;
JSON nested past 64 levels is refused at parse time with a 400 (the provider's shape on the
gateway), 64 levels pass. What is already stored, written here straight into the database, reads
back: one such value must not fail every later read of it. The gateway forwards the numbers the
provider accepts, and what it stores of them reads back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from tests.conftest import ApiClient, TenantFixture
from tests.reliability.bad_input import GatewayRoutes, envelope_error, provider_error, row_counts

# The numbers refused, as a JSON body spells them.
BAD_NUMBERS = {
    "1e20": "1e20",
    "1e19": "1e19",
    "2^63": "9223372036854775808",
    "-2^63 - 1": "-9223372036854775809",
    "2^64": "18446744073709551616",
    "1e400": "1e400",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
}
# The same kinds of number as YAML spells them (PyYAML reads 1e20 without a dot as text).
BAD_YAML_NUMBERS = {
    "1.0e+20": "1.0e+20",
    "2^63": "9223372036854775808",
    "2^64": "18446744073709551616",
    ".nan": ".nan",
    ".inf": ".inf",
    "-.inf": "-.inf",
}
BIGGEST = "9223372036854775807"  # 2^63 - 1: kept as it is

RAG = (
    '{"type": "rag", "name": "kb", "backend": "vectorstore", '
    '"backend_config": {"collection": "docs"}, "filter": {"n": %s}}'
)


@dataclass(frozen=True)
class Write:
    method: str
    path: str
    body: str  # JSON with one %s where the number goes
    param: str
    content_type: str = "application/json"


WRITES = {
    "memory create": Write(
        "POST", "/api/v1/users/u1/memories", '{"content": "x", "metadata": {"n": %s}}', "metadata.n"
    ),
    "memory edit": Write(
        "PATCH",
        "/api/v1/users/u1/memories/{memory}",
        '{"metadata": {"n": [1, %s]}}',
        "metadata.n[1]",
    ),
    "document metadata": Write(
        "POST",
        "/api/v1/collections/docs/documents",
        '{"documents": [{"id": "d1", "text": "t", "metadata": {"a": {"n": %s}}}]}',
        "documents[0].metadata.a.n",
    ),
    "profile attributes": Write(
        "PUT", "/api/v1/users/u1/profile", '{"attributes": {"n": %s}}', "attributes.n"
    ),
    "session message": Write(
        "POST",
        "/api/v1/sessions/s1/messages",
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "n": %s}]}]}',
        "messages[0].content[0].n",
    ),
    "route filter (create)": Write(
        "POST",
        "/api/v1/routes",
        '{"name": "other", "context": {"sources": [' + RAG + "]}}",
        "context.sources[0].filter.n",
    ),
    "route filter (replace)": Write(
        "PUT",
        "/api/v1/routes/probe",
        '{"context": {"sources": [' + RAG + "]}}",
        "context.sources[0].filter.n",
    ),
    "route filter (JSON import)": Write(
        "POST",
        "/api/v1/routes/import",
        '{"routes": [{"name": "other", "plugins": [{"type": "context", "configuration": '
        '{"sources": [' + RAG + "]}}]}]}",
        "routes[0].plugins[0].configuration.sources[0].filter.n",
    ),
    "resolve": Write(
        "POST",
        "/api/v1/resolve",
        '{"route": "probe", "request": {"messages": [{"role": "user", "content": "hi"}], '
        '"temperature": %s}}',
        "request.temperature",
    ),
}

YAML_IMPORT = """\
routes:
  - name: other
    plugins:
      - type: context
        configuration:
          sources:
            - type: rag
              name: kb
              backend: vectorstore
              backend_config: {collection: docs}
              filter: {n: %s}
"""


@pytest.fixture
def probe(acme_api: ApiClient) -> dict[str, str]:
    """acme with what the write paths name: a route, a collection, a memory."""
    assert (
        acme_api.post("/api/v1/routes", {"name": "probe", "context": {"sources": []}}).status_code
        == 201
    )
    assert acme_api.post("/api/v1/collections", {"name": "docs"}).status_code == 201
    memory = acme_api.post("/api/v1/users/u1/memories", {"content": "I live in Porto"})
    assert memory.status_code == 201, memory.content
    return {"memory": str(memory.json()["id"])}


def send(api: ApiClient, write: Write, value: str, names: dict[str, str]) -> Any:
    return api.send(
        write.method,
        write.path.format(**names),
        raw=(write.body % value).encode(),
        content_type=write.content_type,
    )


@pytest.mark.parametrize("number", list(BAD_NUMBERS))
@pytest.mark.parametrize("where", list(WRITES))
def test_a_number_that_does_not_round_trip_is_refused_naming_the_field(
    acme_api: ApiClient, acme: TenantFixture, probe: dict[str, str], where: str, number: str
) -> None:
    write = WRITES[where]
    before = row_counts(acme.schema)
    response = send(acme_api, write, BAD_NUMBERS[number], probe)
    assert response.status_code == 400, response.content
    error = envelope_error(response)
    assert error["code"] == "invalid_request", error
    assert error["param"] == write.param, error
    assert error["message"] == f"{write.param}: a number must be finite and within ±{BIGGEST}"
    assert row_counts(acme.schema) == before  # nothing stored, no record of a refused write


@pytest.mark.parametrize("number", list(BAD_YAML_NUMBERS))
def test_a_yaml_number_that_does_not_round_trip_is_refused_naming_the_field(
    acme_api: ApiClient, acme: TenantFixture, probe: dict[str, str], number: str
) -> None:
    before = row_counts(acme.schema)
    response = acme_api.post(
        "/api/v1/routes/import",
        raw=YAML_IMPORT % BAD_YAML_NUMBERS[number],
        content_type="application/yaml",
    )
    assert response.status_code == 400, response.content
    param = "routes[0].plugins[0].configuration.sources[0].filter.n"
    assert envelope_error(response) == {
        "code": "invalid_request",
        "message": f"{param}: a number must be finite and within ±{BIGGEST}",
        "param": param,
    }
    assert row_counts(acme.schema) == before


@pytest.mark.parametrize("number", [BIGGEST, "1.0e+18"])
def test_the_same_document_with_a_number_that_round_trips_imports(
    acme_api: ApiClient, probe: dict[str, str], number: str
) -> None:
    response = acme_api.post(
        "/api/v1/routes/import", raw=YAML_IMPORT % number, content_type="application/yaml"
    )
    assert response.status_code in (200, 201), response.content
    (source,) = acme_api.get("/api/v1/routes/other").json()["context"]["sources"]
    assert source["filter"] == {"n": float(number) if "e" in number else int(number)}


@pytest.mark.parametrize("value", [BIGGEST, "-" + BIGGEST, "9.2e18", "1.5e-300", "-0.5"])
def test_the_widest_numbers_that_round_trip_are_kept(
    acme_api: ApiClient, probe: dict[str, str], value: str
) -> None:
    for where in ("memory edit", "profile attributes", "route filter (replace)"):
        response = send(acme_api, WRITES[where], value, probe)
        assert response.status_code == 200, response.content
    memory = acme_api.get(f"/api/v1/users/u1/memories/{probe['memory']}")
    assert memory.json()["metadata"] == {"n": [1, json.loads(value)]}
    assert acme_api.get("/api/v1/users/u1/profile").json()["attributes"] == {"n": json.loads(value)}
    (source,) = acme_api.get("/api/v1/routes/probe").json()["context"]["sources"]
    assert source["filter"] == {"n": json.loads(value)}


# --- nesting -------------------------------------------------------------------------------------


def nested(levels: int) -> str:
    """``levels`` objects, one inside the other."""
    return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1) if levels else "1"


# Each write path: the body around the nested value, and how many levels it adds around it.
NESTED_WRITES: dict[str, tuple[str, str, str, int]] = {
    "memory create": ("POST", "/api/v1/users/u1/memories", '{"content": "x", "metadata": %s}', 1),
    "document metadata": (
        "POST",
        "/api/v1/collections/docs/documents",
        '{"documents": [{"id": "d1", "text": "t", "metadata": %s}]}',
        3,
    ),
    "profile attributes": ("PUT", "/api/v1/users/u1/profile", '{"attributes": %s}', 1),
    "route filter": (
        "POST",
        "/api/v1/routes",
        '{"name": "other", "context": {"sources": [' + RAG.replace('{"n": %s}', "%s") + "]}}",
        4,
    ),
    "resolve": (
        "POST",
        "/api/v1/resolve",
        '{"route": "probe", "request": {"messages": [{"role": "user", "content": "hi"}], '
        '"tools": [{"type": "function", "function": {"name": "f", "parameters": %s}}]}}',
        5,
    ),
}


@pytest.mark.parametrize("levels", [65, 300])
@pytest.mark.parametrize("where", list(NESTED_WRITES))
def test_json_nested_past_64_levels_is_a_400(
    acme_api: ApiClient, acme: TenantFixture, probe: dict[str, str], where: str, levels: int
) -> None:
    method, path, body, around = NESTED_WRITES[where]
    before = row_counts(acme.schema)
    raw = body % nested(levels - around)
    response = acme_api.send(method, path, raw=raw.encode())
    assert response.status_code == 400, response.content
    error = envelope_error(response)
    assert error["code"] == "invalid_request", error
    assert error["message"].endswith("nested deeper than 64 levels"), error
    assert row_counts(acme.schema) == before


@pytest.mark.parametrize("where", list(NESTED_WRITES))
def test_json_nested_64_levels_passes(
    acme_api: ApiClient, probe: dict[str, str], where: str
) -> None:
    method, path, body, around = NESTED_WRITES[where]
    response = acme_api.send(method, path, raw=(body % nested(64 - around)).encode())
    assert response.status_code < 300, response.content


def test_a_yaml_document_nested_past_64_levels_is_a_400(acme_api: ApiClient) -> None:
    deep = "routes: " + "[" * 64 + "]" * 64  # the document's own level and 64 more
    response = acme_api.post("/api/v1/routes/import", raw=deep, content_type="application/yaml")
    assert response.status_code == 400, response.content
    assert "nested deeper than 64 levels" in envelope_error(response)["message"]


# The gateway: a tool's JSON schema is where a provider body nests deepest.
GATEWAY_NESTED: dict[str, tuple[str, Callable[[Any], dict[str, Any]], int]] = {
    "openai": (
        "/v1/chat/completions",
        lambda deep: {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}],
        },
        4,
    ),
    "anthropic": (
        "/v1/messages",
        lambda deep: {
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "f", "input_schema": deep}],
        },
        3,
    ),
}


def gateway_body(protocol: str, route: str, levels: int) -> bytes:
    _, body, around = GATEWAY_NESTED[protocol]
    placeholder = "__NESTED__"
    sent = json.dumps({"model": route, **body(placeholder)})
    return sent.replace(f'"{placeholder}"', nested(levels - around)).encode()


@pytest.mark.parametrize("levels", [65, 300])
@pytest.mark.parametrize("protocol", list(GATEWAY_NESTED))
def test_the_gateway_refuses_json_nested_past_64_levels_in_the_providers_shape(
    acme_api: ApiClient,
    acme: TenantFixture,
    gateway_routes: GatewayRoutes,
    protocol: str,
    levels: int,
) -> None:
    path = GATEWAY_NESTED[protocol][0]
    before = row_counts(acme.schema)
    raw = gateway_body(protocol, gateway_routes.names[protocol], levels)
    response = acme_api.post(path, raw=raw)
    assert response.status_code == 400, response.content
    error = provider_error(response, protocol)
    assert error["type"] == "invalid_request_error", error
    assert error["message"].endswith("nested deeper than 64 levels"), error
    assert gateway_routes.upstream.hits == 0
    assert row_counts(acme.schema) == before


@pytest.mark.parametrize("protocol", list(GATEWAY_NESTED))
def test_the_gateway_passes_json_nested_64_levels(
    acme_api: ApiClient, gateway_routes: GatewayRoutes, protocol: str
) -> None:
    path = GATEWAY_NESTED[protocol][0]
    raw = gateway_body(protocol, gateway_routes.names[protocol], 64)
    response = acme_api.post(path, raw=raw)
    assert response.status_code == 200, response.content
    assert gateway_routes.upstream.hits == 1


# --- what is already stored reads back -----------------------------------------------------------

POISON = ["1e20", "18446744073709551616", "-1e30"]


def numbers_in(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for member in value.values() for n in numbers_in(member)]
    if isinstance(value, list):
        return [n for member in value for n in numbers_in(member)]
    return [value] if type(value) in (int, float) else []


def stored(sql: str, *params: Any) -> None:
    """Written straight into the tenant's tables, as an older release or a script may have."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.parametrize("number", POISON)
def test_stored_numbers_past_64_bits_read_back(
    acme_api: ApiClient, acme: TenantFixture, probe: dict[str, str], number: str
) -> None:
    schema = acme.schema
    kb = json.loads(RAG % "1")
    assert acme_api.put("/api/v1/routes/probe", {"context": {"sources": [kb]}}).status_code == 200
    assert acme_api.put("/api/v1/users/u1/profile", {"attributes": {"n": 1}}).status_code == 200
    ingest = {"documents": [{"id": "d1", "text": "Porto is by the sea.", "metadata": {"n": 1}}]}
    assert acme_api.post("/api/v1/collections/docs/documents", ingest).status_code == 202
    session = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert acme_api.post("/api/v1/sessions/s1/messages", session).status_code in (200, 201)

    poison = f'{{"n": {number}}}'
    stored(
        f'UPDATE "{schema}".routing_route SET context = '
        "jsonb_set(context, '{sources,0,filter}', %s::jsonb)",
        poison,
    )
    stored(f'UPDATE "{schema}".memory_memory SET metadata = %s::jsonb', poison)
    stored(f'UPDATE "{schema}".sources_document SET metadata = %s::jsonb', poison)
    stored(f'UPDATE "{schema}".sources_userprofile SET attributes = %s::jsonb', poison)
    stored(
        f'UPDATE "{schema}".sources_chatmessage SET content = %s::jsonb',
        f'[{{"type": "text", "text": "hi", "n": {number}}}]',
    )

    for path in (
        "/api/v1/routes",
        "/api/v1/routes/probe",
        "/api/v1/routes/probe/export",
        "/api/v1/users/u1/memories",
        f"/api/v1/users/u1/memories/{probe['memory']}",
        "/api/v1/users/u1/profile",
        "/api/v1/collections/docs/documents",
        "/api/v1/collections/docs/documents/d1",
        "/api/v1/sessions/s1/messages",
    ):
        response = acme_api.get(path)
        assert response.status_code == 200, (path, response.content)
        if path.endswith("/export"):  # YAML: the integer as it is stored
            assert str(int(Decimal(number))) in response.content.decode(), response.content
        else:  # the number as it was sent, the float it stands for
            assert float(number) in numbers_in(response.json()), (path, response.content)
    # A resolve of the route (its filter is part of the retrieval's cache key) still answers.
    resolve = {"route": "probe", "request": {"messages": [{"role": "user", "content": "Porto?"}]}}
    assert acme_api.post("/api/v1/resolve", resolve).status_code == 200


def test_stored_json_nested_past_what_orjson_writes_reads_back(
    acme_api: ApiClient, acme: TenantFixture, probe: dict[str, str]
) -> None:
    stored(f'UPDATE "{acme.schema}".memory_memory SET metadata = %s::jsonb', nested(400))
    response = acme_api.get(f"/api/v1/users/u1/memories/{probe['memory']}")
    assert response.status_code == 200, response.content
    assert response.content.count(b'{"a":') == 399


# --- the gateway forwards what the provider accepts, and what it stores reads back ---------------


def test_the_gateway_forwards_a_wide_number_and_its_stored_copies_read_back(
    acme_api: ApiClient, acme: TenantFixture, gateway_routes: GatewayRoutes
) -> None:
    """A tool's input is the caller's own JSON: the provider takes 1e20 there, so the gateway
    forwards it; the replay record (content captured) keeps it, and reads back."""
    from tenants.models import Tenant

    Tenant.objects.filter(pk=acme.tenant.pk).update(capture_content=True)
    turn = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"n": 1e20}}
    body = {
        "model": gateway_routes.names["anthropic"],
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [turn]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
        ],
    }
    headers = {"x-session-id": "wide", "x-user-id": "u1"}
    records = []
    for _ in range(2):  # the second call carries the first one's stored turns upstream
        answer = acme_api.post("/v1/messages", body, headers=headers)
        assert answer.status_code == 200, answer.content
        records.append(answer.headers["x-context-resolve-id"])
    assert gateway_routes.upstream.hits == 2
    assert 1e20 in numbers_in(gateway_routes.upstream.last.body)
    for record in records:
        response = acme_api.get(f"/api/v1/replay/{record}")
        assert response.status_code == 200, response.content
        assert 1e20 in numbers_in(response.json()["request"]), response.content
    # The session keeps the call's last user turn and the answer (no number of this body's).
    session = acme_api.get("/api/v1/sessions/wide/messages", {"user": "u1"})
    assert session.status_code == 200, session.content
