"""The bad inputs of issue 16, each as it was found, through the real API: every one is refused
with a 400 that names the field (the envelope on the REST API, the provider's own shape on the
gateway), and nothing is written or passed on to the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

HELLO = {"messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True)
class Fault:
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    query: dict[str, str] = field(default_factory=dict)
    param: str | None = None
    says: str = ""
    content_type: str = "application/json"


def resolve_with(**fields: Any) -> dict[str, Any]:
    return {"route": "probe", "request": HELLO, **fields}


def said(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


SURROGATE_CONTENT = (
    b'{"route": "probe", "request": {"messages": [{"role": "user", "content": "\\ud800"}]}}'
)
RAW_SURROGATE = (
    b'{"route": "probe", "request": {"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}}'
)

FAULTS = {
    "json nested 10,000 deep": Fault(
        "POST",
        "/api/v1/resolve",
        raw=b'{"route": "probe", "request": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
        says="nested",
    ),
    "lone surrogate escape in message content": Fault(
        "POST",
        "/api/v1/resolve",
        raw=SURROGATE_CONTENT,
        param="request.messages[0].content",
        says="contains an unpaired surrogate",
    ),
    "lone surrogate raw in message content": Fault(
        "POST", "/api/v1/resolve", raw=RAW_SURROGATE, says="UTF-8"
    ),
    "nul in resolve user": Fault(
        "POST", "/api/v1/resolve", resolve_with(user=NUL), param="user", says="NUL"
    ),
    "nul in resolve session": Fault(
        "POST", "/api/v1/resolve", resolve_with(session=NUL), param="session", says="NUL"
    ),
    "nul in resolve message": Fault(
        "POST",
        "/api/v1/resolve",
        resolve_with(session="s-1", request=said(NUL)),
        param="request.messages[0].content",
        says="NUL",
    ),
    "nul in session message": Fault(
        "POST",
        "/api/v1/sessions/s-1/messages",
        said(NUL),
        param="messages[0].content",
        says="NUL",
    ),
    "nul in session id in the path": Fault(
        "POST", "/api/v1/sessions/a%00b/messages", said("x"), param="session", says="NUL"
    ),
    "nul in memory text": Fault(
        "POST", "/api/v1/users/u-1/memories", {"content": NUL}, param="content", says="NUL"
    ),
    "nul in document text": Fault(
        "POST",
        "/api/v1/collections/docs/documents",
        {"documents": [{"id": "d-1", "text": NUL}]},
        param="documents[0].text",
        says="NUL",
    ),
    "nul in profile key": Fault(
        "PUT",
        "/api/v1/users/u-1/profile",
        {"attributes": {NUL: "v"}},
        param="attributes",
        says="NUL",
    ),
    "nul in profile value": Fault(
        "PUT",
        "/api/v1/users/u-1/profile",
        {"attributes": {"plan": NUL}},
        param="attributes.plan",
        says="NUL",
    ),
    "nul in route description": Fault(
        "POST",
        "/api/v1/routes",
        {"name": "described", "description": NUL, "context": {"sources": []}},
        param="description",
        says="NUL",
    ),
    "nul in the memories q filter": Fault(
        "GET", "/api/v1/users/u-1/memories", query={"q": NUL}, param="q", says="NUL"
    ),
    "nul in the replay route filter": Fault(
        "GET", "/api/v1/replay", query={"route": NUL}, param="route", says="NUL"
    ),
    "nul in a user id in the path": Fault(
        "GET", "/api/v1/users/a%00b/profile", param="user", says="NUL"
    ),
    # YAML is parsed by the import itself, and its escapes write both.
    "nul in an imported route's description (yaml)": Fault(
        "POST",
        "/api/v1/routes/import",
        raw=b'routes:\n  - name: imported\n    description: "a\\0b"\n',
        content_type="application/yaml",
        param="routes[0].description",
        says="NUL",
    ),
    "lone surrogate in an imported route's description (yaml)": Fault(
        "POST",
        "/api/v1/routes/import",
        raw=b'routes:\n  - name: imported\n    description: "\\ud800"\n',
        content_type="application/yaml",
        param="routes[0].description",
        says="contains an unpaired surrogate",
    ),
    "null content in a session message": Fault(
        "POST",
        "/api/v1/sessions/s-1/messages",
        {"messages": [{"role": "user", "content": None}]},
        param="messages[0].content",
    ),
    "user id of 10,000 characters in the path": Fault(
        "PUT", f"/api/v1/users/{LONG}/profile", {"attributes": {"plan": "gold"}}, param="user"
    ),
    "session id of 10,000 characters in the path": Fault(
        "POST", f"/api/v1/sessions/{LONG}/messages", said("x"), param="session"
    ),
}


@pytest.fixture
def probe_api(acme_api: ApiClient) -> ApiClient:
    """acme with a route and a collection the faults name."""
    route = {"name": "probe", "context": {"sources": []}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    assert acme_api.post("/api/v1/collections", {"name": "docs"}).status_code == 201
    return acme_api


def send(api: ApiClient, fault: Fault) -> Any:
    if fault.method == "GET":
        return api.get(fault.path, fault.query)
    if fault.raw is not None:
        return api.send(fault.method, fault.path, raw=fault.raw, content_type=fault.content_type)
    return api.send(fault.method, fault.path, fault.body)


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_fault_is_a_400_naming_the_field_and_writes_nothing(
    probe_api: ApiClient, acme: TenantFixture, name: str
) -> None:
    fault = FAULTS[name]
    before = row_counts(acme.schema)
    response = send(probe_api, fault)
    assert response.status_code == 400, response.content
    error = envelope_error(response)
    assert error["code"] == "invalid_request", error
    assert error["param"] == fault.param, error
    assert fault.says in error["message"], error
    assert row_counts(acme.schema) == before


# --- the gateway: provider bodies validated in full, in the provider's error shape ---------------

GATEWAY_FAULTS: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (protocol, body without model, the field named)
    "anthropic text block without text": (
        "anthropic",
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
    ),
    "anthropic text block with a number": (
        "anthropic",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages[0].content[0].text",
    ),
    "anthropic tool_result without tool_use_id": (
        "anthropic",
        {
            "messages": [
                {"role": "user", "content": "look it up"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "content": "found"}]},
            ]
        },
        "messages[2].content[0].tool_use_id",
    ),
    "anthropic tool_use without a name": (
        "anthropic",
        {
            "messages": [
                {"role": "user", "content": "look it up"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "input": {}}]},
            ]
        },
        "messages[1].content[0].name",
    ),
    "anthropic system block without text": (
        "anthropic",
        {"system": [{"type": "text"}], "messages": [{"role": "user", "content": "hi"}]},
        "system[0].text",
    ),
    "anthropic system block without a type": (
        "anthropic",
        {"system": [{"text": "be kind"}], "messages": [{"role": "user", "content": "hi"}]},
        "system[0].type",
    ),
    "openai tool_calls entry without a function": (
        "openai",
        {
            "messages": [
                {"role": "user", "content": "look it up"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function"}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "found"},
            ]
        },
        "messages[1].tool_calls[0].function",
    ),
    "openai content part without text": (
        "openai",
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
    ),
    "openai user message with null content": (
        "openai",
        {"messages": [{"role": "user", "content": None}]},
        "messages[0].content",
    ),
    "openai nul in a message": (
        "openai",
        {"messages": [{"role": "user", "content": NUL}]},
        "messages[0].content",
    ),
    "anthropic nul in the metadata user": (
        "anthropic",
        {"metadata": {"user_id": NUL}, "messages": [{"role": "user", "content": "hi"}]},
        "metadata.user_id",
    ),
}
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


@pytest.mark.parametrize("name", list(GATEWAY_FAULTS))
def test_a_malformed_provider_body_is_a_400_in_the_providers_shape(
    acme_api: ApiClient, acme: TenantFixture, gateway_routes: GatewayRoutes, name: str
) -> None:
    protocol, body, param = GATEWAY_FAULTS[name]
    sent = {"model": gateway_routes.names[protocol], "max_tokens": 64, **body}
    before = row_counts(acme.schema)
    response = acme_api.post(PATHS[protocol], sent)
    assert response.status_code == 400, response.content
    error = provider_error(response, protocol)
    assert error["code"] == "invalid_request", error
    assert error["type"] == "invalid_request_error", error
    assert error["message"].startswith(f"{param}: "), error
    if protocol == "openai":
        assert error["param"] == param, error
    assert gateway_routes.upstream.hits == 0  # nothing was passed on to the model
    assert row_counts(acme.schema) == before


def test_a_nul_in_the_user_header_is_refused_on_the_gateway(
    acme_api: ApiClient, gateway_routes: GatewayRoutes
) -> None:
    sent = {"model": gateway_routes.names["openai"], **HELLO}
    response = acme_api.post(PATHS["openai"], sent, headers={"x-user-id": NUL})
    assert response.status_code == 400, response.content
    error = provider_error(response, "openai")
    assert error["param"] == "x-user-id" and "NUL" in error["message"], error
    assert gateway_routes.upstream.hits == 0


def test_what_the_official_clients_send_still_passes(
    acme_api: ApiClient, gateway_routes: GatewayRoutes
) -> None:
    """The full shapes, as the SDKs send them mid tool loop, pass on to the model."""
    openai = {
        "model": gateway_routes.names["openai"],
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    }
    assert acme_api.post(PATHS["openai"], openai).status_code == 200
    anthropic = {
        "model": gateway_routes.names["anthropic"],
        "max_tokens": 64,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking.", "citations": None},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "sunny"}],
                    }
                ],
            },
        ],
    }
    assert acme_api.post(PATHS["anthropic"], anthropic).status_code == 200
    assert gateway_routes.upstream.hits == 2


# --- the replay writer never sees a NUL -----------------------------------------------------------


def test_a_nul_in_the_resolve_user_is_refused_before_a_record_is_written(
    probe_api: ApiClient, acme: TenantFixture
) -> None:
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord

    response = probe_api.post("/api/v1/resolve", resolve_with(user=NUL))
    assert response.status_code == 400, response.content
    with schema_context(acme.schema):
        assert not ReplayRecord.objects.exists()
    # The same resolve without the NUL is recorded.
    response = probe_api.post("/api/v1/resolve", resolve_with(user="ab"))
    assert response.status_code == 200, response.content
    with schema_context(acme.schema):
        assert list(ReplayRecord.objects.values_list("user_id", flat=True)) == ["ab"]
