"""Pre-warm reads a route's user- and session-scoped MCP resources ahead (a real MCP server, the
SDK's, over Streamable HTTP on loopback): the session's next resolve serves them as read, reads
only the resources of the turn's query, and says so; another user of the session is not served
them; a route whose resources all need the query skips the pre-warm, saying why."""

from __future__ import annotations

import uuid
from typing import Any

from tests.conftest import ApiClient, TenantFixture
from tests.sources.mcp.conftest import create_route, register, resolve, resources_route, source_of
from tests.sources.mcp.server import RunningMcpServer

QUESTION = "what is my refund status?"


def prewarm(api: ApiClient, session: str, user: str, route: str) -> dict[str, Any]:
    response = api.post(f"/api/v1/sessions/{session}/prewarm", {"route": route, "user": user})
    assert response.status_code == 202, response.content
    return response.json()


def crm_line(answer: dict[str, Any]) -> dict[str, Any]:
    return next(line for line in answer["sources"] if line["name"] == "crm")


def test_the_users_resources_are_read_ahead_and_served_to_the_next_resolve(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    resources = ["crm://customers/{user}", "crm://sessions/{session}/notes", "crm://search/{query}"]
    create_route(acme_api, resources_route("crm-warm", resources))
    session = f"s-{uuid.uuid4().hex[:8]}"

    answer = prewarm(acme_api, session, "u_alice", "crm-warm")
    assert crm_line(answer)["status"] == "prewarmed", answer
    assert sorted(mcp_server.recorder.reads) == [
        "crm://customers/u_alice",
        f"crm://sessions/{session}/notes",
    ]

    mcp_server.recorder.clear()
    report = resolve(acme_api, "crm-warm", QUESTION, user="u_alice", session=session)
    source = source_of(report)
    assert source["prewarmed"] is True
    assert (source["status"], source["items"]) == ("ok", 3)
    # Only the query's resource is read at the turn.
    assert mcp_server.recorder.reads == [f"crm://search/{QUESTION}"]  # as the server decodes it
    assert source["notes"]["prewarmed"] == [
        "crm://customers/u_alice",
        f"crm://sessions/{session}/notes",
    ]
    uris = [candidate["uri"] for candidate in source["candidates"]]
    assert uris == [
        "crm://customers/u_alice",
        f"crm://sessions/{session}/notes",
        "crm://search/what%20is%20my%20refund%20status%3F",
    ]

    # Another user of the same session is never served them: all three read for that user.
    mcp_server.recorder.clear()
    other = source_of(resolve(acme_api, "crm-warm", QUESTION, user="u_bob", session=session))
    assert "prewarmed" not in other or other["prewarmed"] is False
    assert "crm://customers/u_bob" in mcp_server.recorder.reads
    assert "crm://customers/u_alice" not in mcp_server.recorder.reads


def test_a_route_whose_resources_all_need_the_query_is_not_prewarmed(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("crm-query", ["crm://search/{query}"]))
    line = crm_line(prewarm(acme_api, f"s-{uuid.uuid4().hex[:8]}", "u_alice", "crm-query"))
    assert line["status"] == "skipped"
    assert "needs {query}" in line["reason"]
    assert mcp_server.recorder.reads == []


def test_a_server_that_fails_the_prewarm_is_read_at_the_resolve(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    # No customer of that id: the server refuses the read, so nothing is kept ahead.
    create_route(acme_api, resources_route("crm-missing", ["crm://customers/{user}"]))
    session = f"s-{uuid.uuid4().hex[:8]}"
    line = crm_line(prewarm(acme_api, session, "u_nobody", "crm-missing"))
    assert line["status"] == "failed"
    report = resolve(acme_api, "crm-missing", QUESTION, user="u_nobody", session=session)
    source = source_of(report)
    assert not source.get("prewarmed")
