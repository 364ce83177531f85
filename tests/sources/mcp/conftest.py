"""Fixtures of the MCP tests: one real MCP server on loopback for the session (``server.py``), its
records cleared before each test, and helpers to register it and resolve through it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sources.mcp import client, selectors
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import outbound_allowlist
from tests.sources.mcp.server import RunningMcpServer, running_mcp_server

HEADER_SECRET = "Bearer crm-secret-7f3a"


@pytest.fixture(scope="session")
def mcp_server_session() -> Iterator[RunningMcpServer]:
    with running_mcp_server() as running:
        yield running


@pytest.fixture
def mcp_server(mcp_server_session: RunningMcpServer) -> RunningMcpServer:
    mcp_server_session.recorder.clear()
    return mcp_server_session


@pytest.fixture(autouse=True)
def fresh_negotiations() -> None:
    """Each test finds its servers and negotiates anew: a server another test wrote (and rolled
    back) is not remembered, nor what it said."""
    selectors.forget_endpoints()
    with client._negotiated_lock:
        client._negotiated.clear()


@pytest.fixture
def acme_loopback(acme: TenantFixture) -> Iterator[TenantFixture]:
    """acme's outbound allow-list names the loopback address the test server listens on."""
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        yield acme


def register(
    api: ApiClient,
    url: str,
    *,
    name: str = "crm",
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "url": url, **fields}
    if headers is not None:
        body["headers"] = headers
    response = api.post("/api/v1/mcp-servers", body)
    assert response.status_code == 201, response.content
    return response.json()


def resources_route(name: str, resources: list[str], **source: Any) -> dict[str, Any]:
    source.setdefault("timeout_ms", 10_000)
    return {
        "name": name,
        "context": {
            "sources": [
                {
                    "type": "mcp_resources",
                    "name": "crm",
                    "server": source.pop("server", "crm"),
                    "resources": resources,
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def create_route(api: ApiClient, route: dict[str, Any]) -> None:
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def resolve(
    api: ApiClient,
    route: str,
    question: str = "what is my refund status?",
    *,
    user: str | None = None,
    session: str | None = None,
    expect: int = 200,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "route": route,
        "request": {"messages": [{"role": "user", "content": question}]},
    }
    if user is not None:
        body["user"] = user
    if session is not None:
        body["session"] = session
    response = api.post("/api/v1/resolve", body)
    assert response.status_code == expect, response.content
    return response.json()


def source_of(report: dict[str, Any], name: str = "crm") -> dict[str, Any]:
    return next(source for source in report["sources"] if source["name"] == name)
