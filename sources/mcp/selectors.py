"""Reads of MCP servers (the tenant is the connection's schema), and the platform's stdio servers.

``endpoint_named`` is what the MCP client connects to: a tenant's HTTP server with its header
values decrypted, else a stdio server of ``settings.MCP_STDIO_SERVERS`` (platform configuration,
never a tenant's). Header values leave this module only inside an ``Endpoint``, whose ``repr``
leaves them out.

A found endpoint is remembered by this process for ``ENDPOINT_TTL_S`` (one second) per tenant and
name, so a busy route reads its server's row about once a second instead of on every fetch (the
read, with its thread hop and its statement deadline, costs more than the rest of a fetch's own
work). A write through ``sources.mcp.services`` forgets it at once in the writing process; other
processes see the change within the second. A name that is not found is not remembered.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet

from contextplatform.core import secrets
from sources.mcp_config import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS
from sources.models import McpServer


class UnknownServer(Exception):
    """No MCP server of that name for this tenant."""


class HeadersUnreadable(Exception):
    """A stored header value no configured secret key decrypts."""


def server_named(name: str) -> McpServer | None:
    return McpServer.objects.filter(name=name).first()


def servers() -> QuerySet[McpServer]:
    return McpServer.objects.order_by("name")


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach one MCP server. Header values and the stdio environment stay out
    of ``repr``, so a logged or traced endpoint never shows them."""

    name: str
    transport: Literal["http", "stdio"]
    timeout_ms: int
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, repr=False)
    # Identifies the server for this process's memory of how it negotiated (tenant, name, URL).
    identity: str = ""


def decrypted_headers(server: McpServer) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, token in (server.headers_encrypted or {}).items():
        try:
            headers[name] = secrets.decrypt(token)
        except secrets.SecretUnreadable:
            raise HeadersUnreadable(
                f"MCP server {server.name!r}: header {name!r} cannot be decrypted with the "
                "configured DEPLOYMENT_SECRET_KEYS"
            ) from None
    return headers


def http_endpoint(server: McpServer, schema: str) -> Endpoint:
    return Endpoint(
        name=server.name,
        transport="http",
        timeout_ms=server.timeout_ms,
        url=server.url,
        headers=decrypted_headers(server),
        identity=f"{schema}/{server.name}/{server.url}",
    )


def stdio_servers() -> dict[str, dict[str, Any]]:
    """``settings.MCP_STDIO_SERVERS``: ``{name: {"command", "args", "env", "timeout_ms",
    "tenants"}}`` (``tenants``, a list of schema names, limits who may use one; absent: all)."""
    configured = getattr(settings, "MCP_STDIO_SERVERS", None) or {}
    if not isinstance(configured, dict):
        raise ImproperlyConfigured("MCP_STDIO_SERVERS must be an object of name to server")
    return configured


def stdio_endpoint(name: str, schema: str) -> Endpoint | None:
    entry = stdio_servers().get(name)
    if entry is None:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        raise ImproperlyConfigured(f"MCP_STDIO_SERVERS[{name!r}] needs a command (a string)")
    tenants = entry.get("tenants")
    if tenants is not None and schema not in tenants:
        return None
    args = entry.get("args") or []
    env = entry.get("env")
    timeout_ms = entry.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ImproperlyConfigured(f"MCP_STDIO_SERVERS[{name!r}].args must be a list of strings")
    if env is not None and not isinstance(env, dict):
        raise ImproperlyConfigured(f"MCP_STDIO_SERVERS[{name!r}].env must be an object")
    if not isinstance(timeout_ms, int) or not MIN_TIMEOUT_MS <= timeout_ms <= MAX_TIMEOUT_MS:
        raise ImproperlyConfigured(
            f"MCP_STDIO_SERVERS[{name!r}].timeout_ms must be {MIN_TIMEOUT_MS}-{MAX_TIMEOUT_MS}"
        )
    return Endpoint(
        name=name,
        transport="stdio",
        timeout_ms=timeout_ms,
        command=entry["command"],
        args=tuple(args),
        env={str(k): str(v) for k, v in env.items()} if env is not None else None,
        identity=f"stdio/{name}",
    )


def endpoint_named(name: str, schema: str) -> Endpoint:
    """The tenant's server of that name, else the platform's stdio server; UnknownServer."""
    server = server_named(name)
    if server is not None:
        return http_endpoint(server, schema)
    stdio = stdio_endpoint(name, schema)
    if stdio is not None:
        return stdio
    raise UnknownServer(f"no MCP server named {name!r} (POST /api/v1/mcp-servers registers one)")


ENDPOINT_TTL_S = 1.0
_endpoints: dict[tuple[str, str], tuple[float, Endpoint]] = {}
_endpoints_lock = threading.Lock()


def remembered_endpoint(name: str, schema: str) -> Endpoint | None:
    """The endpoint found for this tenant and name less than ``ENDPOINT_TTL_S`` ago, if any."""
    with _endpoints_lock:
        found = _endpoints.get((schema, name))
        if found is None:
            return None
        if time.monotonic() - found[0] > ENDPOINT_TTL_S:
            del _endpoints[(schema, name)]
            return None
        return found[1]


def remember_endpoint(name: str, schema: str, endpoint: Endpoint) -> None:
    with _endpoints_lock:
        _endpoints[(schema, name)] = (time.monotonic(), endpoint)


def forget_endpoint(name: str, schema: str) -> None:
    with _endpoints_lock:
        _endpoints.pop((schema, name), None)


def forget_endpoints() -> None:
    with _endpoints_lock:
        _endpoints.clear()
