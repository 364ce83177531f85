"""Writes of MCP servers: create, update, delete (validated), and re-encryption of their headers.

Header values are write-only. They are encrypted here, before they reach the model, and no
function of this module logs them or puts them in an error message.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, connection, transaction

from contextplatform.core import secrets
from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.core.validation import parse
from sources.mcp.selectors import forget_endpoint
from sources.mcp_config import READ_ONLY_FIELDS, McpServerSpec
from sources.models import McpServer


def parse_server(data: Any, *, prefix: str = "") -> McpServerSpec:
    """A written server validated (a representation's read-only fields are ignored)."""
    if isinstance(data, dict):
        data = {key: value for key, value in data.items() if key not in READ_ONLY_FIELDS}
    return parse(McpServerSpec, data, prefix=prefix)


def headers_given(spec: McpServerSpec) -> bool:
    """Whether the written body names its headers: absent keeps the stored ones, an object
    replaces them all, ``null`` or ``{}`` removes them."""
    return "headers" in spec.model_fields_set


def _apply(server: McpServer, spec: McpServerSpec, replace_headers: bool) -> None:
    server.name = spec.name
    server.url = spec.url
    server.timeout_ms = spec.timeout_ms
    if replace_headers:
        server.headers_encrypted = {
            name: secrets.encrypt(value) for name, value in (spec.headers or {}).items()
        }


def _forget(*names: str) -> None:
    """This process's fetches see the change at once (others within a second)."""
    for name in names:
        forget_endpoint(name, connection.schema_name)


def _conflict(name: str) -> ApiError:
    return ApiError("conflict", f"MCP server {name!r} already exists", status=409, param="name")


def create_server(*, spec: McpServerSpec) -> McpServer:
    server = McpServer()
    _apply(server, spec, replace_headers=True)
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise _conflict(spec.name) from None
    _forget(spec.name)
    return server


def update_server(
    *, server: McpServer, spec: McpServerSpec, replace_headers: bool | None = None
) -> McpServer:
    """Replace a server's fields; its headers change only when the spec names them (or as
    ``replace_headers`` says)."""
    if spec.name != server.name and McpServer.objects.filter(name=spec.name).exists():
        raise _conflict(spec.name)
    previous = server.name
    _apply(server, spec, headers_given(spec) if replace_headers is None else replace_headers)
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise _conflict(spec.name) from None
    _forget(previous, spec.name)
    return server


def delete_server(*, server: McpServer) -> None:
    server.delete()
    _forget(server.name)


def rotate_header_keys() -> int:
    """Re-encrypt every stored header value of the current schema under the newest key; the
    number of servers rewritten. A value no configured key reads stops the rotation, naming the
    server, so that the operator never drops the only key that still reads it."""
    rotated = 0
    with transaction.atomic():
        for server in McpServer.objects.select_for_update().exclude(headers_encrypted={}):
            try:
                tokens = {
                    name: secrets.rotate(token)
                    for name, token in (server.headers_encrypted or {}).items()
                }
            except secrets.SecretUnreadable:
                raise invalid_request(
                    f"MCP server {server.name!r}: a header is not readable with "
                    "DEPLOYMENT_SECRET_KEYS; add the key it was written with, then rotate again"
                ) from None
            McpServer.objects.filter(pk=server.pk).update(headers_encrypted=tokens)
            _forget(server.name)
            rotated += 1
    return rotated
