"""The outbound guard for httpx2 clients: the HTTP library of the official MCP SDK.

httpx2 is a fork of httpx with a connection layer of its own (httpcore2), so the guarded client of
``httpx_client`` cannot be handed to the SDK's Streamable HTTP transport. This module wires the
same policy (``policy.OutboundPolicy``, the tenant's allow-list) into httpx2: a request hook
refuses a destination before anything is sent (every request, every redirect), the connection
pool's backend checks the very addresses the socket connects to (DNS rebinding), and no proxy is
read from the environment.

Two limits suit a peer that answers in event streams as well as in JSON:

* every byte received counts against a budget: the one ``receiving_at_most`` opened for the
  running operation (all its answers together: one source's fetch, on a client kept between
  fetches), else ``max_response_bytes`` per answer; compressed answers are refused, so what is
  counted is what the SDK decodes (``bounded``);
* a request made while the calling task is being cancelled is refused at once, so a fetch cut by
  its deadline sends nothing more (the SDK closes a session with a DELETE, which a server that
  stopped answering would hold until its own timeout).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore2
import httpx2

from contextplatform.core.outbound.bounded import (
    DEFAULT_MAX_RESPONSE_BYTES,
    ByteBudget,
    counted,
    declared_length,
    refuse_compressed,
)
from contextplatform.core.outbound.policy import (
    DEFAULT_MAX_REDIRECTS,
    OutboundBlocked,
    OutboundError,
    OutboundPolicy,
    pin_connections,
    redirect_rule,
)
from contextplatform.core.outbound.urls import check_before_sending, display_url, target

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


# The running operation's budget. The tasks an operation starts copy the context (the MCP SDK runs
# each request in a task of its own, started in the sender's context), so they all count against it.
_budget: ContextVar[ByteBudget | None] = ContextVar("outbound_response_budget", default=None)


@contextmanager
def receiving_at_most(max_bytes: int) -> Iterator[ByteBudget]:
    """Inside: every answer of every guarded httpx2 client counts against one budget."""
    budget = ByteBudget(max_bytes, shared=True)
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
        async for chunk in counted(self.inner, self.budget, self.where):
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, policy: OutboundPolicy, max_response_bytes: int) -> None:
        # No proxy from the environment (it would bypass the guard); the shared TLS context.
        super().__init__(verify=shared_ssl_context(), trust_env=False)
        pin_connections(self._pool, policy, httpcore2)
        self.max_response_bytes = max_response_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        budget = _budget.get() or ByteBudget(self.max_response_bytes, shared=True)
        response = await super().handle_async_request(request)
        where = display_url(target(str(request.url))[0])
        try:
            refuse_compressed(response.headers, where)
            budget.check_declared(declared_length(response.headers), where)
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
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
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
        await check_before_sending(policy, str(request.url))

    return httpx2.AsyncClient(
        transport=_GuardedTransport(policy, max_response_bytes),
        headers={**(headers or {}), "accept-encoding": "identity"},
        timeout=httpx2.Timeout(timeout_s),
        trust_env=False,
        event_hooks={"request": [check_request]},
        **redirect_rule(max_redirects),
    )
