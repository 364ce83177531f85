"""The outbound guard on httpx: the connectors' (sources/) and the LLM client's calls. The policy
is wired in twice: a request hook checks every request, each redirect included, before it is sent;
the connection pool's network backend resolves, checks and connects to the checked addresses
(``policy.PinnedBackend``). No proxy is read from the environment, no cookie is kept."""

from __future__ import annotations

import functools
import http.cookiejar
import json as jsonlib
import ssl
from collections.abc import Sequence
from typing import Any

import httpcore
import httpx

from contextplatform.core.outbound.bounded import (
    DEFAULT_MAX_RESPONSE_BYTES,
    InvalidResponse,
    read_bounded,
)
from contextplatform.core.outbound.policy import (
    DEFAULT_MAX_REDIRECTS,
    OutboundPolicy,
    pin_connections,
    redirect_rule,
)
from contextplatform.core.outbound.urls import check_before_sending, display_url


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The one verifying TLS context of the process. Building one loads the CA bundle, tens of
    milliseconds on the event loop (more on a busy machine): a client per request must not pay
    that inside its caller's deadline, where no timer can fire while it runs."""
    return httpx.create_ssl_context(trust_env=False)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, policy: OutboundPolicy):
        # No proxy from the environment: it would bypass us.
        super().__init__(trust_env=False, verify=shared_ssl_context())
        pin_connections(self._pool, policy, httpcore)


def guarded_async_client(
    *,
    allowlist: Sequence[str],
    timeout_s: float,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    allow_private: bool | None = None,
) -> httpx.AsyncClient:
    """An AsyncClient that refuses, before sending and at connect time, what the policy refuses."""
    policy = OutboundPolicy.from_allowlist(allowlist, allow_private=allow_private)

    async def check_request(request: httpx.Request) -> None:
        await check_before_sending(policy, request.url)

    client = httpx.AsyncClient(
        transport=_GuardedTransport(policy),
        timeout=timeout_s,
        trust_env=False,
        event_hooks={"request": [check_request]},
        **redirect_rule(max_redirects),
    )
    client.cookies = no_cookies()  # the setter keeps a jar as it is
    return client


def no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps nothing (its policy allows no domain). Outbound clients are pooled
    and shared by many callers (users, and tenants with the same allow-list): a cookie one
    upstream answered to one caller must never ride along with the next caller's request. Set as
    ``client.cookies`` after the client is made: given to the constructor, httpx would copy it
    into a jar of the default policy."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


# --- bounded JSON ------------------------------------------------------------------------------


def refuse_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


def _decode_json(body: bytes, where: str) -> Any:
    if not body.strip():
        raise InvalidResponse(f"{where} answered an empty body, expected JSON")
    try:
        return jsonlib.loads(body, parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError) as error:
        snippet = body[:120].decode("utf-8", "replace")
        raise InvalidResponse(f"{where} answered non-JSON ({error}): {snippet!r}") from error


async def fetch_json_limited(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json: Any = None,
    headers: dict[str, str] | None = None,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Any:
    """The decoded JSON answer; ResponseTooLarge past ``max_bytes``, InvalidResponse if not a
    2xx JSON answer. Transport errors and timeouts are httpx's own exceptions."""
    async with client.stream(method, url, json=json, headers=headers) as response:
        where = display_url(response.url)
        # aiter_bytes is decoded: the limit holds after decompression.
        body = await read_bounded(
            response.aiter_bytes(), max_bytes, headers=response.headers, where=where
        )
    if not response.is_success:
        snippet = body[:200].decode("utf-8", "replace")
        raise InvalidResponse(f"{where} answered HTTP {response.status_code}: {snippet!r}")
    return _decode_json(body, where)
