"""The MCP client's own behaviour against the real test server: the HTTP client kept per event
loop (and closed with it), the negotiation remembered (no second probe), the server found once a
second, and failures in the client's words."""

from __future__ import annotations

import asyncio

import pytest

from sources.mcp import client
from sources.mcp.client import McpError, McpTimeout, http_client, read_resources, remembered
from sources.mcp.selectors import Endpoint
from tests.sources.mcp.server import RunningMcpServer

ALLOW = ["127.0.0.1"]


def endpoint(server: RunningMcpServer, **fields: object) -> Endpoint:
    values: dict[str, object] = {
        "name": "crm",
        "transport": "http",
        "timeout_ms": 5000,
        "url": server.url,
        "headers": {"Authorization": "Bearer a"},
        "identity": f"test/crm/{server.url}",
    }
    values.update(fields)
    return Endpoint(**values)  # type: ignore[arg-type]


def test_one_http_client_per_loop_closed_when_the_loop_shuts_down(
    mcp_server: RunningMcpServer,
) -> None:
    target = endpoint(mcp_server)

    async def twice() -> tuple[object, object, object]:
        first = await http_client(target, ALLOW)
        await read_resources(target, ALLOW, ["crm://status"])
        again = await http_client(target, ALLOW)
        changed = await http_client(endpoint(mcp_server, headers={"Authorization": "b"}), ALLOW)
        await asyncio.sleep(0)  # the replaced client's close runs
        return first, again, changed

    first, again, changed = asyncio.run(twice())
    assert first is again and changed is not first
    assert first.is_closed  # type: ignore[attr-defined]  # replaced: its old header value gone
    assert changed.is_closed  # type: ignore[attr-defined]  # the loop shut down: closed with it


def test_the_least_recently_used_client_is_closed_past_the_limit(
    mcp_server: RunningMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client._clients, "max_clients", 2)  # the pool of MAX_POOLED_CLIENTS

    async def three() -> list[object]:
        made = [
            await http_client(endpoint(mcp_server, identity=f"t/{name}/x"), ALLOW)
            for name in ("a", "b")
        ]
        await http_client(endpoint(mcp_server, identity="t/a/x"), ALLOW)  # a is used again
        made.append(await http_client(endpoint(mcp_server, identity="t/c/x"), ALLOW))
        await asyncio.sleep(0)
        return [made[0].is_closed, made[1].is_closed, made[2].is_closed]  # type: ignore[attr-defined]

    assert asyncio.run(three()) == [False, True, False]  # b, the least recently used, went


def test_the_negotiation_is_remembered_so_the_next_operation_sends_no_probe(
    mcp_server: RunningMcpServer,
) -> None:
    target = endpoint(mcp_server)
    asyncio.run(read_resources(target, ALLOW, ["crm://status"]))
    first = list(mcp_server.recorder.methods)
    assert first[0] == "server/discover" and first[-1] == "resources/read"
    known = remembered(target.identity)
    assert known is not None and known.discover is not None

    mcp_server.recorder.clear()
    asyncio.run(read_resources(target, ALLOW, ["crm://status", "crm://logo"]))
    assert mcp_server.recorder.methods == ["resources/read", "resources/read"]
    assert all(seen["mcp-protocol-version"] == known.mode for seen in mcp_server.recorder.headers)


def test_a_failed_connection_forgets_the_negotiation(mcp_server: RunningMcpServer) -> None:
    target = endpoint(mcp_server)
    asyncio.run(read_resources(target, ALLOW, ["crm://status"]))
    assert remembered(target.identity) is not None
    # The server answered it cannot read a resource: the negotiation stays.
    with pytest.raises(McpError, match="could not read crm://customers/nobody"):
        asyncio.run(read_resources(target, ALLOW, ["crm://customers/nobody"]))
    assert remembered(target.identity) is not None
    # Refused by the allow-list: forgotten, the next operation negotiates anew.
    with pytest.raises(McpError, match="refused"):
        asyncio.run(read_resources(target, [], ["crm://status"]))
    assert remembered(target.identity) is None


def test_the_deadline_is_a_timeout_naming_the_servers_timeout(mcp_server: RunningMcpServer) -> None:
    target = endpoint(mcp_server, timeout_ms=200)
    with pytest.raises(McpTimeout, match="did not answer within 200 ms") as raised:
        asyncio.run(read_resources(target, ALLOW, ["crm://slow"]))
    assert isinstance(raised.value, TimeoutError)
    assert "crm-secret" not in str(raised.value)


def test_headers_never_show_in_an_endpoints_repr(mcp_server: RunningMcpServer) -> None:
    shown = repr(endpoint(mcp_server, headers={"Authorization": "Bearer crm-secret"}))
    assert "crm-secret" not in shown and "crm" in shown


def test_innermost_unwraps_the_sdks_exception_groups() -> None:
    leaf = ConnectionRefusedError("no")
    assert client.innermost(ExceptionGroup("outer", [ExceptionGroup("inner", [leaf])])) is leaf
