"""The outbound guard for httpx2 clients: the HTTP library of the official MCP SDK.

httpx2 is a fork of httpx with a connection layer of its own (httpcore2), so the guarded client of
``outbound`` cannot be handed to the SDK's Streamable HTTP transport. This module builds the same
guard on httpx2, with the same policy (``outbound.OutboundPolicy``, the tenant's allow-list): a
request hook refuses a destination before anything is sent (every request, every redirect), the
connection layer checks the very addresses the socket connects to (DNS rebinding), and no proxy
is read from the environment.

Two limits suit a peer that answers in event streams as well as in JSON:

* every byte received counts against a budget: the one ``receiving_at_most`` opened for the
  running operation (all its answers together: one source's fetch, on a client kept between
  fetches), else ``max_response_bytes`` per answer; compressed answers are refused, so what is
  counted is what the SDK decodes;
* a request made while the calling task is being cancelled is refused at once, so a fetch cut by
  its deadline sends nothing more (the SDK closes a session with a DELETE, which a server that
  stopped answering would hold until its own timeout).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore2
import httpx
import httpx2

from contextplatform.core.outbound import (
    DEFAULT_MAX_RESPONSE_BYTES,
    InvalidResponse,
    OutboundBlocked,
    OutboundError,
    OutboundPolicy,
    ResponseTooLarge,
    _acheck,
    checked_targets,
    connect_first,
    display_url,
)

_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """httpcore2's default context, built once per process: building one reads the system's CA
    bundle (about 20 ms, more than a whole MCP exchange on a near network), and a client-side
    context is safe to share between clients and threads."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpcore2.default_ssl_context(_trust_env=False)
        return _ssl_context


class ByteBudget:
    """What one client may still receive, over all its answers."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.received = 0

    def check_declared(self, declared: int | None, where: str) -> None:
        if declared is not None and self.received + declared > self.max_bytes:
            raise ResponseTooLarge(
                f"{where} announced {declared} bytes, more than the {self.max_bytes} allowed"
            )

    def spend(self, count: int, where: str) -> None:
        self.received += count
        if self.received > self.max_bytes:
            raise ResponseTooLarge(f"{where} answered more than the {self.max_bytes} bytes allowed")


# The running operation's budget. The tasks an operation starts copy the context (the MCP SDK runs
# each request in a task of its own, started in the sender's context), so they all count against it.
_budget: ContextVar[ByteBudget | None] = ContextVar("outbound_response_budget", default=None)


@contextmanager
def receiving_at_most(max_bytes: int) -> Iterator[ByteBudget]:
    """Inside: every answer of every guarded httpx2 client counts against one budget."""
    budget = ByteBudget(max_bytes)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


class _CountedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, budget: ByteBudget, where: str) -> None:
        self.inner = inner
        self.budget = budget
        self.where = where

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.budget.spend(len(chunk), self.where)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _GuardedNetworkBackend(httpcore2.AsyncNetworkBackend):
    """Resolves, checks, and connects to the checked address itself (no second resolution)."""

    def __init__(self, policy: OutboundPolicy, inner: httpcore2.AsyncNetworkBackend) -> None:
        self.policy = policy
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        targets = await checked_targets(self.policy, host, port, httpcore2.ConnectError)
        return await connect_first(
            targets,
            lambda target: self.inner.connect_tcp(
                target, port, timeout, local_address, socket_options
            ),
            (httpcore2.ConnectError, httpcore2.ConnectTimeout),
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise OutboundBlocked("unix sockets are refused")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, policy: OutboundPolicy, max_response_bytes: int) -> None:
        # No proxy from the environment (it would bypass the guard); the shared TLS context.
        super().__init__(verify=shared_ssl_context(), trust_env=False)
        pool = self._pool
        if not isinstance(pool, httpcore2.AsyncConnectionPool) or not hasattr(
            pool, "_network_backend"
        ):
            raise RuntimeError("httpx2/httpcore2 changed: cannot guard outbound connections")
        pool._network_backend = _GuardedNetworkBackend(policy, pool._network_backend)
        self.max_response_bytes = max_response_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        budget = _budget.get() or ByteBudget(self.max_response_bytes)
        response = await super().handle_async_request(request)
        where = display_url(httpx.URL(str(request.url)))
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        try:
            if encoding not in ("", "identity"):
                raise InvalidResponse(f"{where} answered {encoding}-compressed content, refused")
            try:
                declared = int(response.headers["content-length"])
            except (KeyError, ValueError):
                declared = None
            budget.check_declared(declared, where)
        except OutboundError:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CountedStream(response.stream, budget, where)
        return response


def guarded_httpx2_client(
    *,
    allowlist: Sequence[str],
    timeout_s: float,
    headers: dict[str, str] | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_redirects: int = 3,
    allow_private: bool | None = None,
) -> httpx2.AsyncClient:
    """An httpx2 AsyncClient that refuses, before sending and at connect time, what the tenant's
    policy refuses, receives at most what the running operation's budget has left
    (``receiving_at_most``), else ``max_response_bytes`` per answer, and sends nothing for a task
    that is being cancelled. Raises OutboundBlocked, ResponseTooLarge, InvalidResponse (all
    OutboundError) besides httpx2's own errors."""
    policy = OutboundPolicy.from_allowlist(allowlist, allow_private=allow_private)

    async def check_request(request: httpx2.Request) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise OutboundBlocked("request not sent: the caller was cancelled (its deadline)")
        await _acheck(policy, httpx.URL(str(request.url)))

    return httpx2.AsyncClient(
        transport=_GuardedTransport(policy, max_response_bytes),
        headers={**(headers or {}), "accept-encoding": "identity"},
        timeout=httpx2.Timeout(timeout_s),
        follow_redirects=max_redirects > 0,
        max_redirects=max_redirects,
        trust_env=False,
        event_hooks={"request": [check_request]},
    )
