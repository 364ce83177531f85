"""MCP servers as a tenant resource: /api/v1/mcp-servers (list, create, read, replace, delete),
validation in the error envelope, and header values that are written, stored encrypted, sent, and
never returned."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django_tenants.utils import schema_context

from contextplatform.core import secrets
from sources.mcp.services import rotate_header_keys
from sources.mcp_config import MAX_HEADERS
from sources.models import McpServer
from tests.conftest import ApiClient, TenantFixture

SECRET = "Bearer very-secret-value-91c2"
BODY = {
    "name": "crm",
    "url": "https://crm.example.com/mcp",
    "headers": {"Authorization": SECRET, "X-Crm-Tenant": "t-1"},
    "timeout_ms": 4000,
}


def created(api: ApiClient, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = api.post("/api/v1/mcp-servers", body or BODY)
    assert response.status_code == 201, response.content
    return response.json()


def stored(schema: str, name: str = "crm") -> McpServer:
    with schema_context(schema):
        return McpServer.objects.get(name=name)


def test_create_read_list_replace_delete(acme: TenantFixture, acme_api: ApiClient) -> None:
    server = created(acme_api)
    assert server["name"] == "crm" and server["url"] == BODY["url"]
    assert server["timeout_ms"] == 4000
    assert server["headers_set"] == ["Authorization", "X-Crm-Tenant"]
    assert set(server) == {"name", "url", "timeout_ms", "headers_set", "created_at", "updated_at"}

    assert acme_api.get("/api/v1/mcp-servers/crm").json() == server
    assert acme_api.get("/api/v1/mcp-servers").json() == {"data": [server]}

    # A representation posted back is accepted; without headers the stored ones stay.
    replaced = acme_api.put("/api/v1/mcp-servers/crm", {**server, "timeout_ms": 9000})
    assert replaced.status_code == 200, replaced.content
    assert replaced.json()["timeout_ms"] == 9000
    assert replaced.json()["headers_set"] == ["Authorization", "X-Crm-Tenant"]

    renamed = acme_api.put(
        "/api/v1/mcp-servers/crm", {"name": "crm2", "url": "https://other.example.com/mcp"}
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "crm2"
    assert renamed.json()["timeout_ms"] == 5000  # PUT replaces: unset fields take their default
    assert acme_api.get("/api/v1/mcp-servers/crm").status_code == 404

    assert acme_api.delete("/api/v1/mcp-servers/crm2").status_code == 204
    assert acme_api.get("/api/v1/mcp-servers").json() == {"data": []}
    missing = acme_api.delete("/api/v1/mcp-servers/crm2")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_header_values_are_write_only_and_encrypted_at_rest(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api)
    for response in (
        acme_api.get("/api/v1/mcp-servers"),
        acme_api.get("/api/v1/mcp-servers/crm"),
        acme_api.put("/api/v1/mcp-servers/crm", {"url": BODY["url"]}),
    ):
        assert response.status_code == 200
        assert (
            "very-secret" not in response.content.decode()
            and "t-1" not in response.content.decode()
        )
    row = stored(acme.schema)
    assert SECRET not in json.dumps(row.headers_encrypted)
    assert {name: secrets.decrypt(token) for name, token in row.headers_encrypted.items()} == (
        BODY["headers"]
    )


def test_headers_are_replaced_whole_or_removed(acme: TenantFixture, acme_api: ApiClient) -> None:
    created(acme_api)
    replaced = acme_api.put(
        "/api/v1/mcp-servers/crm", {"url": BODY["url"], "headers": {"X-Key": "k2"}}
    )
    assert replaced.json()["headers_set"] == ["X-Key"]
    assert secrets.decrypt(stored(acme.schema).headers_encrypted["X-Key"]) == "k2"
    for cleared in ({}, None):
        acme_api.put("/api/v1/mcp-servers/crm", {"url": BODY["url"], "headers": {"X-Key": "k"}})
        response = acme_api.put("/api/v1/mcp-servers/crm", {"url": BODY["url"], "headers": cleared})
        assert response.json()["headers_set"] == []
        assert stored(acme.schema).headers_encrypted == {}


def test_rotation_re_encrypts_header_values(
    acme: TenantFixture, acme_api: ApiClient, settings: Any
) -> None:
    from cryptography.fernet import Fernet

    created(acme_api)
    before = stored(acme.schema).headers_encrypted
    old = secrets.configured_keys(settings.DEPLOYMENT_SECRET_KEYS or "", settings.SECRET_KEY)[0]
    new = Fernet.generate_key()
    settings.DEPLOYMENT_SECRET_KEYS = f"{new.decode()},{old.decode()}"
    with schema_context(acme.schema):
        assert rotate_header_keys() == 1
    after = stored(acme.schema).headers_encrypted
    assert after.keys() == before.keys() and after != before
    settings.DEPLOYMENT_SECRET_KEYS = new.decode()  # the old key dropped: still readable
    assert secrets.decrypt(after["Authorization"]) == SECRET


def test_the_rotation_command_covers_every_tenant(
    acme: TenantFixture, globex: TenantFixture, acme_api: ApiClient, globex_api: ApiClient
) -> None:
    created(acme_api)
    created(globex_api)
    out = io.StringIO()
    call_command("rotate_mcp_server_keys", stdout=out)
    assert "acme: 1 MCP server(s) re-encrypted" in out.getvalue()
    assert "globex: 1 MCP server(s) re-encrypted" in out.getvalue()
    assert "very-secret" not in out.getvalue()
    for schema in (acme.schema, globex.schema):
        assert secrets.decrypt(stored(schema).headers_encrypted["Authorization"]) == SECRET


def test_conflicts(acme: TenantFixture, acme_api: ApiClient) -> None:
    created(acme_api)
    again = acme_api.post("/api/v1/mcp-servers", BODY)
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    created(acme_api, {**BODY, "name": "other"})
    clash = acme_api.put("/api/v1/mcp-servers/other", {"name": "crm", "url": BODY["url"]})
    assert clash.status_code == 409 and clash.json()["error"]["param"] == "name"


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"url": "stdio:///usr/bin/crm-mcp"}, "url", "http:// or https://"),
        ({"url": "ftp://crm.example.com"}, "url", "http:// or https://"),
        ({"url": "https://user:pw@crm.example.com/mcp"}, "url", "credentials"),
        ({"url": "https://crm.example.com/mcp#x"}, "url", "fragment"),
        ({"url": "x" * 2001}, "url", "2000"),
        ({"name": "bad name"}, "name", "pattern"),
        ({"timeout_ms": 50}, "timeout_ms", "100"),
        ({"timeout_ms": 120_001}, "timeout_ms", "120000"),
        ({"headers": {"Host": "x"}}, "headers", "set by the MCP transport"),
        ({"headers": {"Mcp-Session-Id": "x"}}, "headers", "set by the MCP transport"),
        ({"headers": {"Bad Name": "x"}}, "headers", "not a valid HTTP header name"),
        ({"headers": {"X-A": "line\r\nbreak"}}, "headers", "line breaks"),
        ({"headers": {"X-A": ""}}, "headers", "empty value"),
        ({"headers": {"X-A": "a", "x-a": "b"}}, "headers", "given twice"),
        ({"headers": {"X-A": "v" * 8193}}, "headers", "8192"),
        ({"headers": {f"X-{i}": "v" for i in range(MAX_HEADERS + 1)}}, "headers", "32"),
        ({"command": "/bin/sh"}, "command", "unknown field"),
    ],
)
def test_validation_answers_in_the_envelope(
    acme: TenantFixture, acme_api: ApiClient, change: dict[str, Any], param: str, message: str
) -> None:
    response = acme_api.post("/api/v1/mcp-servers", {**BODY, **change})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["param"] == param and message in error["message"], error
    assert "very-secret" not in response.content.decode()


def test_the_body_must_be_an_object(acme: TenantFixture, acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/mcp-servers", ["crm"])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
