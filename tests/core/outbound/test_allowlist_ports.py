"""Allow-list entries with a port (``host:port``, ``[IPv6]:port``): one host on one port, read
alike by every guarded client (httpx, the gateway's aiohttp, MCP's httpx2), against two real
loopback servers; and a stored list that holds an entry no write path would accept allows nothing
by it, without failing the call."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from contextplatform.core.outbound import policy as outbound
from contextplatform.core.outbound.aiohttp_client import guarded_session
from contextplatform.core.outbound.httpx2_client import guarded_httpx2_client
from contextplatform.core.outbound.httpx_client import fetch_json_limited, guarded_async_client
from contextplatform.core.outbound.policy import (
    OutboundBlocked,
    OutboundPolicy,
    parse_entry,
    validate_allowlist,
)
from contextplatform.core.outbound.urls import check_url
from tests.loopback import Reply, Service, serving_routes

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("entry", "target", "port"),
    [
        ("127.0.0.1:8001", ipaddress.ip_network("127.0.0.1/32"), 8001),
        ("localhost:8001", "localhost", 8001),
        ("Search.Internal.:443", "search.internal", 443),
        ("[::1]:8001", ipaddress.ip_network("::1/128"), 8001),
        ("[::1]", ipaddress.ip_network("::1/128"), None),
        ("::1", ipaddress.ip_network("::1/128"), None),
        ("[::ffff:127.0.0.1]:80", ipaddress.ip_network("127.0.0.1/32"), 80),
        ("127.0.0.1", ipaddress.ip_network("127.0.0.1/32"), None),
        ("10.0.0.0/8", ipaddress.ip_network("10.0.0.0/8"), None),
        ("fd00::/8", ipaddress.ip_network("fd00::/8"), None),
    ],
)
def test_entry_forms(entry: str, target: Any, port: int | None) -> None:
    parsed = parse_entry(entry)
    assert (parsed.target, parsed.port) == (target, port)


@pytest.mark.parametrize(
    "entry",
    [
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:",
        "127.0.0.1:http",
        "localhost:-1",
        "10.0.0.0/8:443",
        "[::1",
        "[::1]x",
        "[::1]:",
        "a:b:c",
        "http://127.0.0.1:8001",
    ],
)
def test_bad_entries_are_refused_by_name(entry: str) -> None:
    with pytest.raises(ValueError) as refused:
        validate_allowlist(["ok.example", entry])
    assert repr(entry) in str(refused.value)


def test_a_port_entry_allows_that_port_only(monkeypatch: pytest.MonkeyPatch) -> None:
    check_url("http://127.0.0.1:8001/v1", ["127.0.0.1:8001"])
    check_url("http://[::1]:8001/v1", ["[::1]:8001"])
    check_url("http://localhost:8001/v1", ["localhost:8001"])
    check_url("http://search.internal/", ["search.internal:80"])  # the scheme's port
    monkeypatch.setattr(outbound, "_resolve", lambda host, port: [ipaddress.ip_address("10.1.1.1")])
    for url, allowlist in [
        ("http://127.0.0.1:8002/v1", ["127.0.0.1:8001"]),
        ("http://127.0.0.1/v1", ["127.0.0.1:8001"]),
        ("http://[::1]:8002/v1", ["[::1]:8001"]),
        ("http://localhost:8002/v1", ["localhost:8001"]),
        ("https://search.internal/", ["search.internal:80"]),
    ]:
        with pytest.raises(OutboundBlocked, match="on port"):
            check_url(url, allowlist)
    check_url("http://127.0.0.1:8002/v1", ["127.0.0.1"])  # a host entry: any port


# --- each guarded client, against two loopback servers -----------------------------------------


@pytest.fixture
def allowed() -> Iterator[Service]:
    with serving_routes({"/v1": Reply(200, b'{"ok": true}', JSON)}) as service:
        yield service


@pytest.fixture
def other(allowed: Service) -> Iterator[Service]:
    """The same host, another port: what the entry does not grant (its 302 leads to ``allowed``)."""
    routes = {
        "/v1": Reply(200, b'{"ok": true}', JSON),
        "/to-allowed": Reply(302, b"", {"Location": allowed.url("/v1")}),
    }
    with serving_routes(routes) as service:
        yield service


async def httpx_get(url: str, allowlist: list[str]) -> Any:
    async with guarded_async_client(allowlist=allowlist, timeout_s=5) as client:
        return await fetch_json_limited(client, "GET", url)


async def aiohttp_post(url: str, allowlist: list[str]) -> int:
    session = guarded_session(allowlist=allowlist)
    try:
        response = await session.post(url, body=b"{}", headers={}, timeout_s=5)
        response.release()
        return response.status
    finally:
        await session.aclose()


async def httpx2_get(url: str, allowlist: list[str]) -> int:
    async with guarded_httpx2_client(allowlist=allowlist, timeout_s=5) as http:
        response = await http.get(url)
        await response.aread()
        return response.status_code


def test_httpx_guard_reaches_the_granted_port_only(allowed: Service, other: Service) -> None:
    entry = [f"127.0.0.1:{allowed.port}"]
    assert asyncio.run(httpx_get(allowed.url("/v1"), entry)) == {"ok": True}
    assert asyncio.run(
        httpx_get(f"http://localhost:{allowed.port}/v1", [f"localhost:{allowed.port}"])
    ) == {"ok": True}
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(httpx_get(other.url("/v1"), entry))
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(httpx_get(f"http://localhost:{other.port}/v1", [f"localhost:{allowed.port}"]))
    assert other.hits == 0


def test_aiohttp_guard_reaches_the_granted_port_only(allowed: Service, other: Service) -> None:
    entry = [f"127.0.0.1:{allowed.port}"]
    assert asyncio.run(aiohttp_post(allowed.url("/v1"), entry)) == 200
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(aiohttp_post(other.url("/v1"), entry))
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(
            aiohttp_post(f"http://localhost:{other.port}/v1", [f"localhost:{allowed.port}"])
        )
    assert other.hits == 0


def test_httpx2_guard_reaches_the_granted_port_only(allowed: Service, other: Service) -> None:
    entry = [f"127.0.0.1:{allowed.port}"]
    assert asyncio.run(httpx2_get(allowed.url("/v1"), entry)) == 200
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(httpx2_get(other.url("/v1"), entry))
    assert other.hits == 0
    # granted the other port instead, its redirect to the first one is refused at that hop
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(httpx2_get(other.url("/to-allowed"), [f"127.0.0.1:{other.port}"]))
    assert allowed.hits == 1  # the first call only


# --- a stored list no write path would accept ---------------------------------------------------


def test_a_stored_bad_entry_allows_nothing_and_is_logged(
    allowed: Service, caplog: pytest.LogCaptureFixture
) -> None:
    stored = ["not a host!", 5, "127.0.0.1:99999", f"127.0.0.1:{allowed.port}"]
    with caplog.at_level(logging.WARNING, logger="contextplatform.core.outbound"):
        policy = OutboundPolicy.from_allowlist(stored)
    assert [(entry.target, entry.port) for entry in policy.entries] == [
        (ipaddress.ip_network("127.0.0.1/32"), allowed.port)
    ]
    assert "'not a host!'" in caplog.text and "99999" in caplog.text
    assert asyncio.run(aiohttp_post(allowed.url("/v1"), stored)) == 200
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(aiohttp_post(allowed.url("/v1"), ["127.0.0.1:99999"]))
    assert OutboundPolicy.from_allowlist("127.0.0.1").entries == ()  # not a list: nothing
