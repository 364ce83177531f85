"""The outbound guard for httpx2 clients (the MCP SDK's HTTP library): the tenant's allow-list
before sending and at connect time, redirects, one byte budget for all answers, compressed answers
refused, nothing sent for a cancelled caller. Traffic only goes to a server of the test's own on
127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from contextplatform.core.outbound import policy as outbound
from contextplatform.core.outbound.bounded import InvalidResponse, ResponseTooLarge
from contextplatform.core.outbound.httpx2_client import (
    guarded_httpx2_client,
    receiving_at_most,
    shared_ssl_context,
)
from contextplatform.core.outbound.policy import OutboundBlocked, OutboundError
from tests.loopback import Reply, Seen, Service, serving_routes

ROUTES = {
    "/small": Reply(200, b"x" * 1000, {"Content-Type": "text/plain"}),
    "/chunked": Reply(200, b"y" * 5000, {"Content-Type": "text/plain"}, chunked=True),
    "/gzip": Reply(200, gzip.compress(b"z" * 100), {"Content-Encoding": "gzip"}),
    "/redirect-metadata": Reply(302, b"", {"Location": "http://169.254.169.254/latest/"}),
    "/redirect-small": Reply(302, b"", {"Location": "/small"}),
}


@pytest.fixture
def service() -> Iterator[Service]:
    with serving_routes(ROUTES) as running:
        yield running


def get(url: str, **client: Any) -> httpx2.Response:
    async def go() -> httpx2.Response:
        async with guarded_httpx2_client(timeout_s=5, **client) as http:
            response = await http.get(url)
            await response.aread()
            return response

    return asyncio.run(go())


def test_loopback_is_refused_before_anything_is_sent(service: Service) -> None:
    with pytest.raises(OutboundBlocked, match="loopback"):
        get(service.url("/small"), allowlist=[])
    assert service.hits == 0
    assert get(service.url("/small"), allowlist=["127.0.0.1"]).status_code == 200


def test_a_redirect_to_a_refused_address_is_not_followed(service: Service) -> None:
    with pytest.raises(OutboundBlocked, match="link-local"):
        get(service.url("/redirect-metadata"), allowlist=["127.0.0.1"])
    assert get(service.url("/redirect-small"), allowlist=["127.0.0.1"]).content == b"x" * 1000


def test_the_connection_layer_refuses_even_without_the_request_hook(service: Service) -> None:
    async def go() -> None:
        async with guarded_httpx2_client(allowlist=[], timeout_s=5) as http:
            http.event_hooks = {"request": [], "response": []}
            await http.get(service.url("/small"))

    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(go())
    assert service.hits == 0


def test_dns_rebinding_is_caught_at_connect_time(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name first resolves to an allowed address (the request hook), then, when the socket
    connects, to the loopback server."""
    answers = iter(["127.0.0.2", "127.0.0.1"])
    monkeypatch.setattr(
        outbound, "_resolve", lambda host, port: [ipaddress.ip_address(next(answers))]
    )
    with pytest.raises(OutboundBlocked, match=r"rebind\.test \(127\.0\.0\.1\)"):
        get(f"http://rebind.test:{service.port}/small", allowlist=["127.0.0.2"])
    assert service.hits == 0


def test_a_name_that_stops_resolving_is_a_failed_connection(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolvable for the request hook, not when the socket connects: httpx2's own connect error
    (what the SDK handles as an unreachable server), not the guard's refusal."""
    calls = iter([True, False])

    def resolve(host: str, port: int) -> list[outbound.IPAddress]:
        if next(calls):
            return [ipaddress.ip_address("127.0.0.1")]
        raise OutboundError(f"cannot resolve {host}: no address")

    monkeypatch.setattr(outbound, "_resolve", resolve)
    with pytest.raises(httpx2.ConnectError, match=r"cannot resolve gone\.test"):
        get(f"http://gone.test:{service.port}/small", allowlist=["127.0.0.1"])
    assert service.hits == 0


def test_a_byte_budget_per_answer_or_per_operation(service: Service) -> None:
    with pytest.raises(ResponseTooLarge, match="announced 1000 bytes"):
        get(service.url("/small"), allowlist=["127.0.0.1"], max_response_bytes=999)
    with pytest.raises(ResponseTooLarge, match="more than the 4096 bytes"):
        get(service.url("/chunked"), allowlist=["127.0.0.1"], max_response_bytes=4096)

    async def twice(budget: int | None) -> None:
        async with guarded_httpx2_client(
            allowlist=["127.0.0.1"], timeout_s=5, max_response_bytes=1500
        ) as http:
            if budget is None:  # each answer on its own: 1000 of 1500 twice
                await http.get(service.url("/small"))
                await http.get(service.url("/small"))
                return
            with receiving_at_most(budget):  # one budget for the operation, tasks included
                await http.get(service.url("/small"))  # 1000 of 1500
                await asyncio.ensure_future(http.get(service.url("/small")))  # 500 left

    asyncio.run(twice(None))
    with pytest.raises(ResponseTooLarge, match="1500"):
        asyncio.run(twice(1500))


def test_compressed_answers_are_refused_and_identity_asked_for(service: Service) -> None:
    with pytest.raises(InvalidResponse, match="gzip-compressed"):
        get(service.url("/gzip"), allowlist=["127.0.0.1"])
    seen: Seen = service.requests[-1]
    assert seen.headers["accept-encoding"] == "identity"


def test_nothing_is_sent_for_a_cancelled_caller(service: Service) -> None:
    refused: list[BaseException] = []

    async def cancelled_then_cleaning_up(http: httpx2.AsyncClient) -> None:
        try:
            await asyncio.sleep(30)
        finally:  # what a transport's close does: one more request, as the task is cancelled
            try:
                await http.delete(service.url("/small"))
            except OutboundBlocked as error:
                refused.append(error)

    async def go() -> None:
        async with guarded_httpx2_client(allowlist=["127.0.0.1"], timeout_s=5) as http:
            task = asyncio.ensure_future(cancelled_then_cleaning_up(http))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    assert len(refused) == 1 and "cancelled" in str(refused[0])
    assert service.hits == 0


def test_the_tls_context_is_built_once() -> None:
    assert shared_ssl_context() is shared_ssl_context()
