"""HTTP endpoints of MCP servers: list, create, read, replace, delete. Thin: parse, call a service
or selector, present. No representation holds a header value, only ``headers_set`` (the names)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import not_found
from contextplatform.core.read_back import without_read_only
from contextplatform.core.views import ApiView, replacement_body
from sources.mcp import selectors, services
from sources.mcp_config import McpServerSpec
from sources.models import McpServer

# What a server's representation adds to what it writes; a write ignores them (core/read_back.py):
# a body without ``headers`` keeps the stored values on PUT, and has none on POST.
READ_ONLY = frozenset({"headers_set", "created_at", "updated_at"})


def server_representation(server: McpServer) -> dict[str, Any]:
    return {
        "name": server.name,
        "url": server.url,
        "timeout_ms": server.timeout_ms,
        "headers_set": server.header_names,  # write-only values: the names alone are shown
        "created_at": server.created_at.isoformat(),
        "updated_at": server.updated_at.isoformat(),
    }


def existing_server(name: str) -> McpServer:
    server = selectors.server_named(name)
    if server is None:
        raise not_found(f"MCP server {name!r} does not exist")
    return server


class McpServerListView(ApiView):
    required_scopes = {"GET": "routes.read", "POST": "routes.write"}

    @extend_schema(responses={200: dict}, summary="List MCP servers")
    def get(self, request: Request) -> Response:
        return Response({"data": [server_representation(s) for s in selectors.servers()]})

    @extend_schema(request=McpServerSpec, responses={201: dict}, summary="Register an MCP server")
    def post(self, request: Request) -> Response:
        server = services.create_server(
            spec=services.parse_server(without_read_only(request.data, READ_ONLY))
        )
        return Response(server_representation(server), status=status.HTTP_201_CREATED)


class McpServerDetailView(ApiView):
    required_scopes = {"GET": "routes.read", "PUT": "routes.write", "DELETE": "routes.write"}

    @extend_schema(responses={200: dict}, summary="Read an MCP server")
    def get(self, request: Request, name: str) -> Response:
        return Response(server_representation(existing_server(name)))

    @extend_schema(
        request=McpServerSpec,
        responses={200: dict},
        summary="Replace an MCP server (without headers the stored ones stay; {} or null clears)",
    )
    def put(self, request: Request, name: str) -> Response:
        server = existing_server(name)
        data = replacement_body(request.data, READ_ONLY, name)
        updated = services.update_server(server=server, spec=services.parse_server(data))
        return Response(server_representation(updated))

    @extend_schema(responses={204: None}, summary="Delete an MCP server")
    def delete(self, request: Request, name: str) -> Response:
        services.delete_server(server=existing_server(name))
        return Response(status=status.HTTP_204_NO_CONTENT)
