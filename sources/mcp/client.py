"""Talking to MCP servers with the official SDK (``mcp``), guarded and bounded.

Every operation (the resources a source reads, the tool a RAG backend calls, the admin's test of
a server) opens a client of its own, runs under one deadline and closes the client again:

* a tenant's server is reached over Streamable HTTP through ``guarded_httpx2_client``: the
  tenant's outbound allow-list on every request and connection, at most ``max_response_bytes``
  received by the operation in all, the server's header values sent on every request (and never
  logged). The HTTP client, and so its open connections, is kept per event loop for the same
  server, headers and allow-list (an event loop lives as long as its worker process under
  uvicorn), so a fetch reuses the connections of the last one instead of opening new ones; the
  clients of a loop are closed when the loop shuts down;
* a platform stdio server (``settings.MCP_STDIO_SERVERS``) is started for the operation, with
  only the environment its entry names (the SDK's safe default otherwise);
* the deadline is the server's ``timeout_ms`` or what is left of the source's deadline
  (``sources.fetch_deadline``), whichever is shorter; past it the operation is cancelled and
  raises ``McpTimeout`` (a ``TimeoutError``: the source reports ``timeout``). A cancelled
  operation sends nothing more, not even the DELETE that would close its session.

How a server negotiated (a modern protocol version and its ``server/discover`` answer, or the
legacy handshake) is remembered for five minutes per tenant, server and URL, so the next
operation adopts it without a probe; a failed operation forgets it (except a resource the server
answered it cannot read), so the next one negotiates anew. Every failure is an
``McpError`` whose message names the server and never a header value.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from asgiref.sync import sync_to_async
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from contextplatform.core.loop_clients import LoopClients
from contextplatform.core.outbound.bounded import DEFAULT_MAX_RESPONSE_BYTES
from contextplatform.core.outbound.httpx2_client import guarded_httpx2_client, receiving_at_most
from contextplatform.core.outbound.policy import OutboundError
from sources import fetch_deadline
from sources.deadline import within_deadline
from sources.mcp.selectors import (
    Endpoint,
    endpoint_named,
    remember_endpoint,
    remembered_endpoint,
)

T = TypeVar("T")

NEGOTIATION_TTL_S = 300.0
LEGACY = "legacy"
CLIENT_INFO = types.Implementation(name="context-platform", version="1")
# HTTP clients kept per event loop; the least recently used is closed past this.
MAX_POOLED_CLIENTS = 64
# A kept client's own timeout is only a backstop: each operation's deadline ends it first.
BACKSTOP_TIMEOUT_S = 130.0
# How much of a server's listings the admin's test shows.
MAX_LISTED = 200
MAX_LIST_PAGES = 10


class McpError(Exception):
    """The MCP server could not be used: unknown, refused by the allow-list, unreachable, an error
    answer, an answer too large."""


class McpTimeout(McpError, TimeoutError):
    """The operation's deadline (the server's ``timeout_ms`` or the source's) ended it."""


# --- which server --------------------------------------------------------------------------------


async def endpoint_for(name: str, schema: str, timeout_seconds: float) -> Endpoint:
    """The tenant's server (or the platform's stdio server) of that name, as remembered for a
    second, else read on the request's own thread under the source's statement deadline. Raises
    UnknownServer, HeadersUnreadable."""
    found = remembered_endpoint(name, schema)
    if found is None:
        found = await sync_to_async(within_deadline)(
            timeout_seconds, lambda: endpoint_named(name, schema)
        )
        remember_endpoint(name, schema, found)
    return found


# --- what each server negotiated ------------------------------------------------------------------


@dataclass(frozen=True)
class Negotiated:
    mode: str  # a modern protocol version, or "legacy" (the initialize handshake)
    discover: types.DiscoverResult | None
    at: float


_negotiated: dict[str, Negotiated] = {}
_negotiated_lock = threading.Lock()


def remembered(identity: str) -> Negotiated | None:
    with _negotiated_lock:
        known = _negotiated.get(identity)
        if known is not None and time.monotonic() - known.at > NEGOTIATION_TTL_S:
            del _negotiated[identity]
            return None
        return known


def remember(identity: str, client: Client) -> None:
    session = client.session
    discover = session.discover_result
    mode = client.protocol_version if discover is not None else LEGACY
    with _negotiated_lock:
        known = _negotiated.get(identity)
        if known is None or known.mode != mode:
            _negotiated[identity] = Negotiated(mode, discover, time.monotonic())


def forget(identity: str) -> None:
    with _negotiated_lock:
        _negotiated.pop(identity, None)


# --- HTTP clients kept per event loop ---------------------------------------------------------


_clients: LoopClients[httpx2.AsyncClient] = LoopClients(MAX_POOLED_CLIENTS)


def fingerprint(headers: dict[str, str]) -> str:
    """Tells header sets apart without keeping their values in a key."""
    return hashlib.sha256(json.dumps(sorted(headers.items())).encode()).hexdigest()


async def http_client(endpoint: Endpoint, allowlist: Sequence[str]) -> httpx2.AsyncClient:
    """This loop's client for the server, its headers and the allow-list (made when missing). A
    server whose headers or allow-list changed: its other clients (and the old header values they
    hold) go."""
    key = (endpoint.identity, fingerprint(endpoint.headers), tuple(allowlist))
    return await _clients.get(
        key,
        lambda: guarded_httpx2_client(
            allowlist=allowlist, timeout_s=BACKSTOP_TIMEOUT_S, headers=endpoint.headers
        ),
        replaces=lambda other: isinstance(other, tuple) and other[0] == endpoint.identity,
    )


# --- one operation --------------------------------------------------------------------------------


def _client(endpoint: Endpoint, http: httpx2.AsyncClient | None, max_bytes: int) -> Client:
    known = remembered(endpoint.identity)
    mode = known.mode if known is not None else "auto"
    target: Any
    if endpoint.transport == "http":
        target = streamable_http_client(
            endpoint.url, http_client=http, terminate_on_close=True, max_sse_event_size=max_bytes
        )
    else:
        target = StdioServerParameters(
            command=endpoint.command, args=list(endpoint.args), env=endpoint.env
        )
    return Client(
        target,
        mode=mode,
        prior_discover=known.discover if known is not None else None,
        cache=None,  # every read asks the server: the sources decide what is cached
        client_info=CLIENT_INFO,
    )


def timeout_words(endpoint: Endpoint, seconds: float, source_binds: bool) -> str:
    if source_binds:
        return f"MCP server {endpoint.name!r}: cut at the source's deadline ({seconds * 1000:.0f} ms left)"
    return f"MCP server {endpoint.name!r} did not answer within {endpoint.timeout_ms} ms"


def innermost(error: BaseException) -> BaseException:
    """The first error an exception group carries (the SDK's task groups wrap transport errors)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def failure(endpoint: Endpoint, error: BaseException) -> McpError:
    leaf = innermost(error)
    name = f"MCP server {endpoint.name!r}"
    if isinstance(leaf, McpError):
        return leaf
    if isinstance(leaf, OutboundError):
        return McpError(f"{name}: {leaf}")
    if isinstance(leaf, MCPError):
        return McpError(f"{name} answered an error ({leaf.code}): {leaf.message}"[:500])
    if isinstance(leaf, httpx2.TimeoutException):
        return McpTimeout(f"{name} did not answer in time ({type(leaf).__name__})")
    if isinstance(leaf, httpx2.HTTPError | OSError):
        return McpError(f"{name} is unreachable: {type(leaf).__name__}: {leaf}"[:500])
    return McpError(f"{name}: {type(leaf).__name__}: {leaf}"[:500])


async def run(
    endpoint: Endpoint,
    allowlist: Sequence[str],
    operation: Callable[[Client], Awaitable[T]],
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> T:
    """``operation`` on a client connected to ``endpoint``, under the operation's deadline.
    Raises McpError (McpTimeout past the deadline)."""
    own = endpoint.timeout_ms / 1000
    seconds = fetch_deadline.shortened(own)
    said = timeout_words(endpoint, seconds, fetch_deadline.binds(own))
    try:
        with receiving_at_most(max_response_bytes):
            http = await http_client(endpoint, allowlist) if endpoint.transport == "http" else None
            async with asyncio.timeout(seconds):
                async with _client(endpoint, http, max_response_bytes) as client:
                    remember(endpoint.identity, client)
                    return await operation(client)
    except TimeoutError:
        raise McpTimeout(said) from None
    except Exception as error:
        if not isinstance(innermost(error), McpError):  # a resource it could not read: it stays
            forget(endpoint.identity)
        raise failure(endpoint, error) from None


# --- the operations -------------------------------------------------------------------------------


async def read_resources(
    endpoint: Endpoint,
    allowlist: Sequence[str],
    uris: Sequence[str],
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> list[types.ReadResourceResult]:
    """Every URI read at once on one connection, in order; the first that fails fails them all
    (naming it)."""

    async def operation(client: Client) -> list[types.ReadResourceResult]:
        answers = await asyncio.gather(
            *(client.read_resource(uri) for uri in uris), return_exceptions=True
        )
        results: list[types.ReadResourceResult] = []
        for uri, answer in zip(uris, answers, strict=True):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            if isinstance(answer, BaseException):
                if isinstance(innermost(answer), MCPError):
                    leaf = innermost(answer)
                    assert isinstance(leaf, MCPError)
                    raise McpError(
                        f"MCP server {endpoint.name!r} could not read {uri}: {leaf.message}"[:500]
                    )
                raise answer
            results.append(answer)
        return results

    return await run(endpoint, allowlist, operation, max_response_bytes=max_response_bytes)


async def call_tool(
    endpoint: Endpoint,
    allowlist: Sequence[str],
    tool: str,
    arguments: dict[str, Any],
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> types.CallToolResult:
    async def operation(client: Client) -> types.CallToolResult:
        return await client.call_tool(tool, arguments)

    return await run(endpoint, allowlist, operation, max_response_bytes=max_response_bytes)


@dataclass
class ServerDescription:
    """What the admin's test connection shows of a server."""

    protocol: str
    server: str
    resources: list[dict[str, str]] = field(default_factory=list)
    templates: list[dict[str, str]] = field(default_factory=list)
    tools: list[dict[str, str]] = field(default_factory=list)
    offered: dict[str, bool] = field(default_factory=dict)  # resources, tools
    truncated: bool = False


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], attribute: str) -> list[Any]:
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await fetch(cursor)
        found.extend(getattr(page, attribute))
        cursor = page.next_cursor
        if cursor is None or len(found) >= MAX_LISTED:
            break
    return found


async def describe(endpoint: Endpoint, allowlist: Sequence[str]) -> ServerDescription:
    """The server's resources, resource templates and tools (what it offers of them)."""

    async def operation(client: Client) -> ServerDescription:
        capabilities = client.server_capabilities
        info = client.server_info
        described = ServerDescription(
            protocol=client.protocol_version,
            server=f"{info.name} {info.version}".strip() if info is not None else "",
            offered={
                "resources": capabilities.resources is not None,
                "tools": capabilities.tools is not None,
            },
        )
        if capabilities.resources is not None:
            resources = await _pages(
                lambda cursor: client.list_resources(cursor=cursor), "resources"
            )
            templates = await _pages(
                lambda cursor: client.list_resource_templates(cursor=cursor), "resource_templates"
            )
            described.resources = [
                {"uri": str(r.uri), "name": r.name, "description": r.description or ""}
                for r in resources[:MAX_LISTED]
            ]
            described.templates = [
                {"uri": t.uri_template, "name": t.name, "description": t.description or ""}
                for t in templates[:MAX_LISTED]
            ]
            described.truncated |= len(resources) > MAX_LISTED or len(templates) > MAX_LISTED
        if capabilities.tools is not None:
            tools = await _pages(lambda cursor: client.list_tools(cursor=cursor), "tools")
            described.tools = [
                {"uri": "", "name": t.name, "description": t.description or ""}
                for t in tools[:MAX_LISTED]
            ]
            described.truncated |= len(tools) > MAX_LISTED
        return described

    return await run(endpoint, allowlist, operation)
