"""Tenant isolation of MCP servers: another tenant neither sees, changes nor uses them. Both ways."""

from __future__ import annotations

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import outbound_allowlist
from tests.sources.mcp.conftest import create_route, register, resolve, resources_route, source_of
from tests.sources.mcp.server import RunningMcpServer


@pytest.fixture(params=["acme_owns", "globex_owns"])
def pair(
    request: pytest.FixtureRequest,
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
) -> tuple[ApiClient, TenantFixture, ApiClient, TenantFixture]:
    """(owner client, owner tenant, intruder client, intruder tenant)."""
    if request.param == "acme_owns":
        return acme_api, acme, globex_api, globex
    return globex_api, globex, acme_api, acme


def test_servers_are_invisible_and_untouchable_across_tenants(
    pair: tuple[ApiClient, TenantFixture, ApiClient, TenantFixture],
) -> None:
    owner, _, intruder, _ = pair
    register(owner, "https://crm.example.com/mcp", name="private", headers={"X-Key": "owner"})
    assert intruder.get("/api/v1/mcp-servers").json() == {"data": []}
    assert intruder.get("/api/v1/mcp-servers/private").status_code == 404
    put = intruder.put("/api/v1/mcp-servers/private", {"url": "https://evil.example.com/mcp"})
    assert put.status_code == 404
    assert intruder.delete("/api/v1/mcp-servers/private").status_code == 404
    # The same name is free in the intruder's own schema: a server of its own, not the owner's.
    register(intruder, "https://theirs.example.com/mcp", name="private")
    mine = owner.get("/api/v1/mcp-servers/private").json()
    assert mine["url"] == "https://crm.example.com/mcp" and mine["headers_set"] == ["X-Key"]


def test_a_route_cannot_use_another_tenants_server(
    pair: tuple[ApiClient, TenantFixture, ApiClient, TenantFixture],
    mcp_server: RunningMcpServer,
) -> None:
    owner, owner_tenant, intruder, intruder_tenant = pair
    register(owner, mcp_server.url, headers={"Authorization": "Bearer owner-only"})
    create_route(intruder, resources_route("borrow", ["crm://status"]))
    with (
        outbound_allowlist(owner_tenant.schema, ["127.0.0.1"]),
        outbound_allowlist(intruder_tenant.schema, ["127.0.0.1"]),
    ):
        source = source_of(resolve(intruder, "borrow"))
    assert source["status"] == "failed"
    assert "no MCP server named 'crm'" in source["error"]
    assert mcp_server.recorder.headers == []  # nothing was sent with the owner's headers
