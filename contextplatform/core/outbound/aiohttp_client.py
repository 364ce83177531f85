"""The outbound guard for aiohttp sessions: the gateway's calls to model deployments.

The gateway forwards every chat call, so its HTTP client's own cost is paid on every request:
aiohttp's C parser and connection pool cost a tenth of the CPU httpx does per call on the same
upstream (httpx's pool polls every idle connection before each request), which is a fifth of a
gateway call. This module wires the one policy (``policy``, the tenant's allow-list) into aiohttp:

* before anything is sent, the URL is checked: http or https, a host, and a host written as an
  address (in any spelling: aiohttp connects to it without resolving it) must be allowed;
* a name is resolved by the session's resolver, which checks every address it returns, so the
  socket connects only to checked addresses (DNS rebinding: each new connection resolves anew);
* no redirect is followed, no proxy is read from the environment, no cookie is kept (sessions
  are pooled and shared by every caller with the same allow-list).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Mapping, Sequence

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from contextplatform.core.outbound.httpx_client import shared_ssl_context
from contextplatform.core.outbound.policy import (
    OutboundPolicy,
    checked_targets,
    taken_for_an_address,
)
from contextplatform.core.outbound.urls import target

# Connections kept per session, as many as httpx's default pool: a worker's concurrent calls to
# its deployments. Idle ones are closed after KEEPALIVE_S, under the 5 s that servers commonly
# keep an idle connection (uvicorn, gunicorn), so that the client closes first and never sends on
# a connection the server is closing.
MAX_CONNECTIONS = 100
KEEPALIVE_S = 4.0


class Unresolved(OSError):
    """A name that does not resolve: aiohttp reports it as its DNS error, whose message is this
    one's ``strerror`` (the guard's "cannot resolve …")."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


class GuardedResolver(AbstractResolver):
    """The names the allow-list names resolve as usual; any other name's every address is checked
    (``OutboundBlocked`` when one is refused); one that does not resolve is aiohttp's DNS error."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self.policy.names(host, port):
            return await self.inner.resolve(host, port, family)
        addresses = await checked_targets(self.policy, host, port, Unresolved)
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        await self.inner.close()


@functools.lru_cache(maxsize=256)
def checked_url(url: str) -> tuple[httpx.URL, str, int]:
    """``urls.target``: the URL parsed as every outbound URL is, its host and port
    (``OutboundBlocked`` for one that is not a valid http(s) URL with a host); kept, as a
    deployment calls the same URL every time."""
    return target(url)


class GuardedSession:
    """An aiohttp session behind the tenant's outbound policy (see the module's docstring)."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(policy),
            ssl=shared_ssl_context(),
            limit=MAX_CONNECTIONS,
            keepalive_timeout=KEEPALIVE_S,
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    @property
    def is_closed(self) -> bool:
        return self.session.closed

    async def aclose(self) -> None:
        await self.session.close()

    async def check(self, url: str) -> httpx.URL:
        """Refuse before sending: an invalid URL, or a host that aiohttp would connect to without
        the resolver's check, unless the address it stands for is allowed."""
        parsed, host, port = checked_url(url)
        if taken_for_an_address(host):
            await self.policy.check_before_sending(host, port)
        return parsed

    async def post(
        self, url: str, *, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> aiohttp.ClientResponse:
        """Send; the response's headers have arrived, its body is the caller's to read and close.
        ``timeout_s`` bounds the connection (a free pooled one included) and every read."""
        await self.check(url)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
        )
        return await self.session.post(
            url, data=body, headers=dict(headers), timeout=timeout, allow_redirects=False
        )


def guarded_session(
    *, allowlist: Sequence[str], allow_private: bool | None = None
) -> GuardedSession:
    return GuardedSession(OutboundPolicy.from_allowlist(allowlist, allow_private=allow_private))


__all__ = [
    "GuardedResolver",
    "GuardedSession",
    "Unresolved",
    "checked_url",
    "guarded_session",
    "taken_for_an_address",
]
