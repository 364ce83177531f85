"""The operators' MCP server pages: header values typed in, stored encrypted, never shown again;
and "Test connection", which lists what a real MCP server offers (or why it cannot be reached)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from contextplatform.core import secrets
from sources.mcp.services import create_server, parse_server
from sources.models import McpServer
from tests.admin.conftest import ACME_HOST, make_user, signed_in
from tests.conftest import TenantFixture
from tests.loopback import outbound_allowlist
from tests.sources.mcp.conftest import HEADER_SECRET
from tests.sources.mcp.server import RunningMcpServer


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def signed_in_as(acme: TenantFixture, role: str) -> Client:
    make_user(acme.tenant, f"mcp_{role}", role)
    return signed_in(f"mcp_{role}", ACME_HOST)


def a_server(schema: str, url: str) -> McpServer:
    with schema_context(schema):
        spec = parse_server(
            {"name": "crm", "url": url, "headers": {"Authorization": HEADER_SECRET}}
        )
        return create_server(spec=spec)


def connection_test_url(server: McpServer) -> str:
    return reverse("admin:sources_mcpserver_test_connection", args=[quote(server.pk)])


def test_test_connection_lists_resources_templates_and_tools(
    acme: TenantFixture, mcp_server: RunningMcpServer
) -> None:
    server = a_server(acme.schema, mcp_server.url)
    operator = signed_in_as(acme, "operator")

    change_page = operator.get(reverse("admin:sources_mcpserver_change", args=[server.pk]))
    assert connection_test_url(server) in change_page.content.decode()  # the page links the test
    opened = operator.get(connection_test_url(server))
    assert opened.status_code == 200
    assert mcp_server.recorder.headers == []  # opening the page connects to nothing

    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        page = operator.post(connection_test_url(server))
    assert page.status_code == 200
    html = page.content.decode()
    description = page.context["description"]
    assert page.context["error"] is None
    assert description.server == "test-crm 1.0" and description.protocol
    resources = {entry["uri"] for entry in description.resources}
    assert {"crm://status", "crm://logo", "crm://large"} <= resources
    templates = {entry["uri"] for entry in description.templates}
    assert {"crm://customers/{user}", "crm://sessions/{session}/notes"} <= templates
    tools = {entry["name"] for entry in description.tools}
    assert {"search", "search_wrapped", "search_text", "broken", "slow"} <= tools
    for shown in ("crm://status", "crm://customers/{user}", "Search the knowledge base"):
        assert shown in html
    assert all(seen["authorization"] == HEADER_SECRET for seen in mcp_server.recorder.headers)
    assert "crm-secret" not in html


def test_test_connection_shows_the_error(acme: TenantFixture, mcp_server: RunningMcpServer) -> None:
    server = a_server(acme.schema, mcp_server.url)
    page = signed_in_as(acme, "operator").post(connection_test_url(server))  # no allow-list entry
    assert page.status_code == 200 and page.context["description"] is None
    error = page.context["error"]
    assert "refused" in error and "loopback" in error and "allow-list" in error
    assert 'id="mcp-error"' in page.content.decode()
    assert mcp_server.recorder.headers == []


def test_an_auditor_can_neither_open_nor_run_the_test(
    acme: TenantFixture, mcp_server: RunningMcpServer
) -> None:
    server = a_server(acme.schema, mcp_server.url)
    auditor = signed_in_as(acme, "auditor")
    assert (
        auditor.get(reverse("admin:sources_mcpserver_change", args=[server.pk])).status_code == 200
    )
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        assert auditor.get(connection_test_url(server)).status_code == 403
        assert auditor.post(connection_test_url(server)).status_code == 403
    assert mcp_server.recorder.headers == []


def test_header_values_are_write_only_on_the_pages(acme: TenantFixture) -> None:
    operator = signed_in_as(acme, "operator")
    added = operator.post(
        reverse("admin:sources_mcpserver_add"),
        {
            "name": "crm",
            "url": "https://crm.example.com/mcp",
            "timeout_ms": "5000",
            "headers": json.dumps({"Authorization": HEADER_SECRET}),
        },
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    with schema_context(acme.schema):
        server = McpServer.objects.get(name="crm")
    assert secrets.decrypt(server.headers_encrypted["Authorization"]) == HEADER_SECRET

    change_url = reverse("admin:sources_mcpserver_change", args=[server.pk])
    page = operator.get(change_url).content.decode()
    assert "crm-secret" not in page and "Authorization" in page  # the name shows, not the value
    listed = operator.get(reverse("admin:sources_mcpserver_changelist")).content.decode()
    assert "crm-secret" not in listed and "Authorization" in listed

    # Blank keeps the stored headers; a refused header is said next to the field, nothing stored.
    kept = operator.post(change_url, {"name": "crm", "url": server.url, "timeout_ms": "6000"})
    assert kept.status_code == 302
    refused = operator.post(
        change_url,
        {"name": "crm", "url": server.url, "timeout_ms": "6000", "headers": '{"Host": "x"}'},
    )
    assert refused.status_code == 200
    assert "set by the MCP transport" in str(refused.context["adminform"].form.errors["headers"])
    assert "crm-secret" not in refused.content.decode()
    with schema_context(acme.schema):
        server.refresh_from_db()
    assert server.timeout_ms == 6000 and list(server.headers_encrypted) == ["Authorization"]

    cleared = operator.post(
        change_url, {"name": "crm", "url": server.url, "timeout_ms": "6000", "clear_headers": "on"}
    )
    assert cleared.status_code == 302
    with schema_context(acme.schema):
        server.refresh_from_db()
    assert server.headers_encrypted == {}
