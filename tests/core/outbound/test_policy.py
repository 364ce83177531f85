"""The outbound HTTP guard. Traffic only ever goes to a server of the test's own on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError

from contextplatform.core.outbound import policy as outbound
from contextplatform.core.outbound.bounded import InvalidResponse, ResponseTooLarge
from contextplatform.core.outbound.httpx_client import fetch_json_limited, guarded_async_client
from contextplatform.core.outbound.policy import (
    OutboundBlocked,
    OutboundError,
    refusal_reason,
    validate_allowlist,
)
from contextplatform.core.outbound.urls import check_url
from tenants.models import Tenant
from tests.loopback import Reply, Seen, Service, running_service
from tests.ssrf_targets import INTERNAL, Target

# --- refusals by address -----------------------------------------------------------------------

REFUSED = [
    "http://127.0.0.1/",
    "http://127.1.2.3:8080/x",
    "http://localhost/",
    "http://LOCALHOST/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://100.64.0.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "https://user:secret@10.0.0.1/path?token=abc",
    # and the shared SSRF table (tests/ssrf_targets.py), which every outbound path is tried with
    *(target.url(8080, "/x") for target in INTERNAL if not target.unresolved),
]


@pytest.mark.parametrize("target", [t for t in INTERNAL if t.unresolved], ids=lambda t: t.host)
def test_names_that_do_not_resolve_here_are_refused_as_unresolvable(target: Target) -> None:
    try:
        check_url(target.url(8080, "/x"), [])
    except OutboundError as refused:  # refused as the internal address it resolves to, or none
        assert "refused" in str(refused) or "cannot resolve" in str(refused)
    else:
        pytest.fail(f"{target.host} passed the guard")


@pytest.mark.parametrize("url", REFUSED)
def test_private_and_special_addresses_are_refused(url: str) -> None:
    with pytest.raises(OutboundBlocked) as refused:
        check_url(url, [])
    assert "secret" not in str(refused.value) and "token" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "gopher://127.0.0.1/", "/relative"]
)
def test_only_http_and_https_are_allowed(url: str) -> None:
    with pytest.raises(OutboundBlocked, match=r"scheme|no host"):
        check_url(url, ["example.com", "127.0.0.1"])


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("fd12:3456::1", "unique local"),
        ("100.64.0.1", "shared address space (CGNAT)"),
        ("0.0.0.0", "unspecified"),
        ("::ffff:10.0.0.1", "private"),
        ("224.0.0.1", "multicast"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_refusal_reasons(address: str, reason: str | None) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) == reason


def test_public_addresses_pass_without_an_allowlist() -> None:
    check_url("https://8.8.8.8/search", [])  # a check only: nothing is sent
    check_url("http://[2606:4700:4700::1111]:8443/", [])


def test_every_resolved_address_must_be_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        "mixed.test": ["8.8.8.8", "10.0.0.7"],
        "public.test": ["8.8.8.8", "2606:4700:4700::1111"],
    }
    monkeypatch.setattr(
        outbound, "_resolve", lambda host, port: [ipaddress.ip_address(a) for a in answers[host]]
    )
    with pytest.raises(OutboundBlocked, match=r"mixed\.test \(10\.0\.0\.7\)"):
        check_url("http://mixed.test/", [])
    check_url("http://public.test/", [])
    check_url("http://mixed.test/", ["10.0.0.0/24"])


def test_unresolvable_host_is_an_outbound_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_host(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(outbound.socket, "getaddrinfo", no_such_host)  # no DNS query leaves
    with pytest.raises(outbound.OutboundError, match="cannot resolve"):
        check_url("http://does-not-exist.invalid/", [])


# --- the allow-list ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowlist"),
    [
        ("http://localhost:8080/", ["localhost"]),
        ("http://LocalHost./", ["localhost"]),
        ("http://search.internal/", ["Search.Internal"]),
        ("http://127.0.0.1:9200/", ["127.0.0.1"]),
        ("http://10.1.2.3/", ["10.0.0.0/8"]),
        ("http://172.16.5.4/", ["172.16.0.0/12"]),
        ("http://[fd00::1]/", ["fd00::/8"]),
        ("http://[::1]/", ["[::1]"]),
        ("http://[::ffff:127.0.0.1]/", ["127.0.0.1"]),
        ("http://127.0.0.1/", ["::ffff:127.0.0.1"]),
    ],
)
def test_allowlist_by_host_ip_or_cidr(url: str, allowlist: list[str]) -> None:
    check_url(url, allowlist)


def test_allowlist_names_only_what_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbound, "_resolve", lambda host, port: [ipaddress.ip_address("10.9.9.9")])
    check_url("http://search.internal/", ["search.internal"])
    with pytest.raises(OutboundBlocked):
        check_url("http://other.internal/", ["search.internal"])
    with pytest.raises(OutboundBlocked):
        check_url("http://10.1.2.3/", ["10.9.0.0/16"])


def test_operators_can_allow_every_address(settings: Any) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = True
    check_url("http://10.1.2.3/", [])
    check_url("http://[::1]/", [])
    with pytest.raises(OutboundBlocked):
        check_url("file:///etc/passwd", [])
    settings.OUTBOUND_ALLOW_PRIVATE = False
    with pytest.raises(OutboundBlocked):
        check_url("http://10.1.2.3/", [])


def test_allowlist_validation() -> None:
    assert validate_allowlist(["a.example", "10.0.0.0/8", "127.0.0.1", "[::1]", "fd00::/8"])
    for bad in (["not a host!"], ["10.0.0.0/33"], [5], [""], "10.0.0.1", ["a..b"]):
        with pytest.raises(ValueError):
            validate_allowlist(bad)


def test_tenant_field_validates_and_shows_in_admin() -> None:
    from django.contrib import admin

    field_ = Tenant._meta.get_field("outbound_allowlist")
    assert field_.clean(["search.internal", "10.0.0.0/8"], None) == [
        "search.internal",
        "10.0.0.0/8",
    ]
    with pytest.raises(ValidationError):
        field_.clean(["http://search.internal/"], None)
    tenant_admin = admin.site._registry[Tenant]
    assert "outbound_allowlist" in tenant_admin.list_display
    assert "outbound_allowlist" in [f.name for f in Tenant._meta.get_fields()]
    assert Tenant().outbound_allowlist == []


# --- the guarded client against a loopback server ----------------------------------------------


JSON = {"Content-Type": "application/json"}
ROUTES: dict[str, Reply] = {
    "/json": Reply(body=b'{"ok": true, "hits": [1, 2]}', headers=JSON),
    "/redirect-private": Reply(302, b"", {"Location": "http://10.0.0.1/steal"}),
    "/redirect-metadata": Reply(302, b"", {"Location": "http://169.254.169.254/latest/"}),
    "/redirect-json": Reply(302, b"", {"Location": "/json"}),
    "/loop": Reply(302, b"", {"Location": "/loop"}),
    "/big": Reply(body=b'{"pad": "' + b"x" * 5000 + b'"}', headers=JSON),
    # No Content-Length, 64 KiB in 1 KiB chunks: the limit must hold while reading.
    "/stream": Reply(body=b" " * 64 * 1024, headers=JSON, chunked=True),
    "/text": Reply(body=b"<html>not json</html>", headers={"Content-Type": "text/html"}),
    "/empty": Reply(body=b"", headers={}),
    "/nan": Reply(body=b'{"score": NaN}', headers=JSON),
    "/error": Reply(500, b'{"error": "down"}', JSON),
    "/gzip-bomb": Reply(
        body=gzip.compress(b'{"pad": "' + b" " * 200_000 + b'"}'),
        headers={**JSON, "Content-Encoding": "gzip"},
    ),
}


def by_path(seen: Seen) -> Reply:
    return ROUTES[seen.path.split("?", 1)[0]]


@pytest.fixture
def loopback() -> Iterator[Service]:
    with running_service() as service:
        service.responder = by_path
        yield service


async def fetch(url: str, allowlist: list[str], **kwargs: Any) -> Any:
    max_redirects = kwargs.pop("max_redirects", 3)
    async with guarded_async_client(
        allowlist=allowlist, timeout_s=5, max_redirects=max_redirects
    ) as client:
        return await fetch_json_limited(client, "GET", url, **kwargs)


def test_loopback_allowed_through_the_allowlist(loopback: Service) -> None:
    assert asyncio.run(fetch(f"{loopback.base}/json", ["127.0.0.1"])) == {
        "ok": True,
        "hits": [1, 2],
    }
    assert asyncio.run(fetch(f"{loopback.base}/json", ["127.0.0.0/8"]))["ok"] is True


def test_loopback_refused_without_allowlist_and_nothing_is_sent(loopback: Service) -> None:
    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(fetch(f"{loopback.base}/json", []))
    assert loopback.paths == []


def test_post_with_json_body(loopback: Service) -> None:
    async def post() -> Any:
        async with guarded_async_client(allowlist=["127.0.0.1"], timeout_s=5) as client:
            return await fetch_json_limited(
                client, "POST", f"{loopback.base}/json", json={"q": "x"}, headers={"X-A": "1"}
            )

    assert asyncio.run(post())["ok"] is True


@pytest.mark.parametrize("path", ["/redirect-private", "/redirect-metadata"])
def test_redirect_to_a_disallowed_address_is_refused(loopback: Service, path: str) -> None:
    with pytest.raises(OutboundBlocked):
        asyncio.run(fetch(f"{loopback.base}{path}", ["127.0.0.1"]))
    assert loopback.paths == [path]  # the redirect was never followed


def test_redirect_to_an_allowed_address_is_followed(loopback: Service) -> None:
    assert asyncio.run(fetch(f"{loopback.base}/redirect-json", ["127.0.0.1"]))["ok"] is True
    assert loopback.paths == ["/redirect-json", "/json"]


def test_redirects_are_bounded(loopback: Service) -> None:
    with pytest.raises(httpx.TooManyRedirects):
        asyncio.run(fetch(f"{loopback.base}/loop", ["127.0.0.1"], max_redirects=3))
    assert len(loopback.paths) == 4


@pytest.mark.parametrize("path", ["/big", "/stream", "/gzip-bomb"])
def test_answers_larger_than_max_bytes_are_refused(loopback: Service, path: str) -> None:
    with pytest.raises(ResponseTooLarge):
        asyncio.run(fetch(f"{loopback.base}{path}", ["127.0.0.1"], max_bytes=4096))


def test_answers_within_max_bytes_pass(loopback: Service) -> None:
    body = asyncio.run(fetch(f"{loopback.base}/big", ["127.0.0.1"], max_bytes=5100))
    assert len(body["pad"]) == 5000


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/text", "non-JSON"),
        ("/empty", "empty body"),
        ("/nan", "non-JSON"),
        ("/error", "HTTP 500"),
    ],
)
def test_bad_answers_are_clear_errors(loopback: Service, path: str, message: str) -> None:
    with pytest.raises(InvalidResponse, match=message) as refused:
        asyncio.run(fetch(f"{loopback.base}{path}", ["127.0.0.1"]))
    assert "127.0.0.1" in str(refused.value)


def test_credentials_never_appear_in_errors(loopback: Service) -> None:
    port = loopback.port
    with pytest.raises(InvalidResponse) as refused:
        asyncio.run(fetch(f"http://user:hunter2@127.0.0.1:{port}/error?key=k1", ["127.0.0.1"]))
    assert "hunter2" not in str(refused.value) and "k1" not in str(refused.value)


def test_connection_layer_refuses_even_without_the_request_hook(loopback: Service) -> None:
    async def run() -> None:
        async with guarded_async_client(allowlist=[], timeout_s=5) as client:
            client.event_hooks = {"request": [], "response": []}
            await client.get(f"{loopback.base}/json")

    with pytest.raises(OutboundBlocked, match="loopback"):
        asyncio.run(run())
    assert loopback.paths == []


def test_dns_rebinding_is_caught_at_connect_time(
    loopback: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name first resolves to an allowed address, then to the loopback server."""
    answers = iter(["127.0.0.2", "127.0.0.1", "127.0.0.1"])
    monkeypatch.setattr(
        outbound, "_resolve", lambda host, port: [ipaddress.ip_address(next(answers))]
    )
    port = loopback.port
    with pytest.raises(OutboundBlocked, match=r"rebind\.test \(127\.0\.0\.1\)"):
        asyncio.run(fetch(f"http://rebind.test:{port}/json", ["127.0.0.2"]))
    assert loopback.paths == []


def test_allowed_host_name_connects(loopback: Service) -> None:
    port = loopback.port
    assert asyncio.run(fetch(f"http://localhost:{port}/json", ["localhost"]))["ok"] is True


def test_a_guarded_client_keeps_no_cookie_from_one_call_to_the_next() -> None:
    """Guarded clients are pooled across users and tenants (the gateway's upstream calls, the
    connectors): a cookie one answer set must never go out with the next request."""
    from contextplatform.core.outbound.httpx_client import guarded_async_client

    def respond(seen: Seen) -> Reply:
        return Reply(body=b"{}", headers={"Set-Cookie": "session=ann-secret; Path=/"})

    with running_service() as service:
        service.responder = respond

        async def twice() -> None:
            async with guarded_async_client(allowlist=["127.0.0.1"], timeout_s=5) as client:
                for user in ("ann", "bob"):
                    response = await client.get(service.url(f"/u/{user}"))
                    assert response.status_code == 200
                assert not client.cookies.jar  # nothing was kept

        asyncio.run(twice())
    assert [seen.path for seen in service.requests] == ["/u/ann", "/u/bob"]
    assert all("cookie" not in seen.headers for seen in service.requests)
