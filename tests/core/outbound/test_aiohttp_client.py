"""The outbound guard for aiohttp sessions (the gateway's calls to model deployments): the
tenant's allow-list before sending and in the resolver, hosts written as addresses in every
spelling, no redirect followed, no proxy from the environment, no cookie kept. Traffic only goes to
a server of the test's own on 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator

import aiohttp
import pytest

from contextplatform.core.outbound import policy as outbound
from contextplatform.core.outbound.aiohttp_client import guarded_session
from contextplatform.core.outbound.policy import (
    OutboundBlocked,
    OutboundError,
    taken_for_an_address,
)
from tests.loopback import Reply, Service, serving_routes

ROUTES = {
    "/small": Reply(200, b"x" * 1000, {"Content-Type": "text/plain"}),
    "/cookie": Reply(200, b"{}", {"Set-Cookie": "session=secret; Path=/"}),
    "/redirect-metadata": Reply(302, b"", {"Location": "http://169.254.169.254/latest/"}),
}


@pytest.fixture
def service() -> Iterator[Service]:
    with serving_routes(ROUTES) as running:
        yield running


def post(*urls: str, allowlist: list[str]) -> list[tuple[int, bytes]]:
    """POST to each URL in turn on one session; each answer's status and body."""

    async def go() -> list[tuple[int, bytes]]:
        session = guarded_session(allowlist=allowlist)
        try:
            answers = []
            for url in urls:
                response = await session.post(url, body=b"{}", headers={}, timeout_s=5)
                answers.append((response.status, await response.read()))
                response.release()
            return answers
        finally:
            await session.aclose()

    return asyncio.run(go())


def test_loopback_is_refused_before_anything_is_sent(service: Service) -> None:
    with pytest.raises(OutboundBlocked, match="loopback"):
        post(service.url("/small"), allowlist=[])
    assert service.hits == 0
    assert post(service.url("/small"), allowlist=["127.0.0.1"]) == [(200, b"x" * 1000)]


@pytest.mark.parametrize("host", ["127.1", "2130706433", "127.0.1", "[::1]", "0"])
def test_a_host_written_as_an_address_is_checked_whatever_its_spelling(
    service: Service, host: str
) -> None:
    """aiohttp connects to these without asking the resolver: the guard checks them first."""
    with pytest.raises(OutboundError, match=r"refused|cannot resolve"):
        post(f"http://{host}:{service.port}/small", allowlist=[])
    assert service.hits == 0


def test_what_aiohttp_takes_for_an_address() -> None:
    assert taken_for_an_address("127.1") and taken_for_an_address("::1")
    assert taken_for_an_address("127.0.0.1.")
    assert not taken_for_an_address("api.openai.com")
    assert not taken_for_an_address("0x7f.1")  # a name to aiohttp: the resolver checks it


def test_a_name_is_checked_by_the_resolver_on_the_address_it_connects_to(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name resolving to the loopback server (DNS rebinding, or a name pointed inside) is
    refused when the connection is made; allow-listed by name, it connects."""
    monkeypatch.setattr(
        outbound, "_resolve", lambda host, port: [ipaddress.ip_address("127.0.0.1")]
    )
    with pytest.raises(OutboundBlocked, match=r"rebind\.test \(127\.0\.0\.1\)"):
        post(f"http://rebind.test:{service.port}/small", allowlist=["127.0.0.2"])
    assert service.hits == 0
    assert post(f"http://localhost:{service.port}/small", allowlist=["localhost"]) == [
        (200, b"x" * 1000)
    ]


def test_a_name_that_does_not_resolve_is_aiohttps_dns_error_with_the_reason(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    def resolve(host: str, port: int) -> list[outbound.IPAddress]:
        raise OutboundError(f"cannot resolve {host}: no address")

    monkeypatch.setattr(outbound, "_resolve", resolve)
    with pytest.raises(aiohttp.ClientConnectorDNSError, match=r"cannot resolve gone\.test"):
        post(f"http://gone.test:{service.port}/small", allowlist=[])
    assert service.hits == 0


def test_a_redirect_is_not_followed(service: Service) -> None:
    assert post(service.url("/redirect-metadata"), allowlist=["127.0.0.1"]) == [(302, b"")]
    assert service.paths == ["/redirect-metadata"]


def test_no_cookie_rides_along_with_the_next_call(service: Service) -> None:
    post(service.url("/cookie"), service.url("/small"), allowlist=["127.0.0.1"])
    assert [seen.headers.get("cookie") for seen in service.requests] == [None, None]


def test_no_proxy_is_read_from_the_environment(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://10.255.255.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert post(service.url("/small"), allowlist=["127.0.0.1"]) == [(200, b"x" * 1000)]


def test_an_invalid_url_is_refused_before_sending() -> None:
    with pytest.raises(OutboundBlocked, match="not a valid URL"):
        post("http://0177.0.0.1:9/v1", allowlist=[])
    with pytest.raises(OutboundBlocked, match="scheme 'file'"):
        post("file:///etc/passwd", allowlist=[])
