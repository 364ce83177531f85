"""HTTP endpoints of routes, resolve and replay. Thin: parse, call a service or selector, present."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.api.errors import ApiError, invalid_request, not_found
from contextplatform.api.views import ApiView
from contextplatform.routing import selectors, services
from contextplatform.routing.config import RouteSpec, validate_route_spec
from contextplatform.routing.models import ReplayRecord, Route
from contextplatform.routing.preview import preview_route
from contextplatform.routing.resolver import resolve
from contextplatform.routing.turns import begin_memory_turn, begin_turn, complete_turn


class MemoryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: bool | None = Field(
        default=None, description="false opts this turn out of the memory write"
    )


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    user: str | None = Field(default=None, min_length=1, max_length=200)
    session: str | None = Field(default=None, min_length=1, max_length=200)
    format: Literal["openai", "anthropic"] | None = None
    request: dict[str, Any]
    memory: MemoryOptions | None = None


class PreviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    query: str = Field(min_length=1, max_length=20_000)
    user: str | None = Field(default=None, min_length=1, max_length=200)


class ResponseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    response: dict[str, Any]


def route_representation(route: Route) -> dict[str, Any]:
    return {
        "name": route.name,
        "description": route.description,
        "model": route.model,
        "context": route.context,
        "created_at": route.created_at.isoformat(),
        "updated_at": route.updated_at.isoformat(),
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class ResolveView(ApiView):
    required_scopes = {"POST": "resolve"}

    @extend_schema(
        request=ResolveBody, responses={200: dict}, summary="Resolve context for a chat request"
    )
    def post(self, request: Request) -> Response:
        body = self.body(request, ResolveBody)
        tenant = self.tenant(request)
        resolution = resolve(
            tenant_schema=tenant.schema_name,
            capture_content=tenant.capture_content,
            route_name=body.route,
            user=body.user,
            session=body.session,
            request_body=body.request,
            chat_format=body.format,
            allowlist=getattr(tenant, "outbound_allowlist", None) or (),
            headers=request.headers,
        )
        blocked = resolution.blocked
        if blocked:
            source = blocked[0]
            raise ApiError(
                "source_failed",
                f"source {source.name!r} {'timed out' if source.status == 'timeout' else 'failed'} "
                f"and the route says on_failure: block (replay {resolution.id})",
                status=503,
                param=f"sources.{source.name}",
            )
        begin_memory_turn(
            resolution=resolution,
            user=body.user,
            requested=body.memory.store if body.memory else None,
        )
        if body.session:
            begin_turn(
                resolve_id=resolution.id,
                user=body.user,
                session=body.session,
                messages=body.request["messages"],
            )
        return Response(resolution.report())


class ContextPreviewView(ApiView):
    required_scopes = {"POST": "routes.read"}

    @extend_schema(
        request=PreviewBody, responses={200: dict}, summary="Preview a route's RAG retrieval"
    )
    def post(self, request: Request) -> Response:
        body = self.body(request, PreviewBody)
        tenant = self.tenant(request)
        return Response(
            preview_route(
                tenant_schema=tenant.schema_name,
                route_name=body.route,
                query=body.query,
                user=body.user,
                allowlist=getattr(tenant, "outbound_allowlist", None) or (),
            )
        )


class ResolveResponseView(ApiView):
    required_scopes = {"POST": "resolve"}

    @extend_schema(
        request=ResponseBody, responses={202: dict}, summary="Hand the model's answer back"
    )
    def post(self, request: Request, resolve_id: str) -> Response:
        body = self.body(request, ResponseBody)
        result = complete_turn(
            record_id=resolve_id,
            response=body.response,
            capture_content=self.tenant(request).capture_content,
        )
        return Response(result, status=status.HTTP_202_ACCEPTED)


class RouteListView(ApiView):
    required_scopes = {"GET": "routes.read", "POST": "routes.write"}

    @extend_schema(responses={200: dict}, summary="List routes")
    def get(self, request: Request) -> Response:
        return Response({"data": [route_representation(r) for r in selectors.all_routes()]})

    @extend_schema(request=RouteSpec, responses={201: dict}, summary="Create a route")
    def post(self, request: Request) -> Response:
        spec = validate_route_spec(request.data)
        route = services.create_route(spec=spec)
        return Response(route_representation(route), status=status.HTTP_201_CREATED)


class RouteDetailView(ApiView):
    required_scopes = {
        "GET": "routes.read",
        "PUT": "routes.write",
        "PATCH": "routes.write",
        "DELETE": "routes.write",
    }

    @staticmethod
    def route(name: str) -> Route:
        route = selectors.route_by_name(name)
        if route is None:
            raise not_found(f"route {name!r} does not exist")
        return route

    @extend_schema(responses={200: dict}, summary="Read a route")
    def get(self, request: Request, name: str) -> Response:
        return Response(route_representation(self.route(name)))

    @extend_schema(request=RouteSpec, responses={200: dict}, summary="Replace a route")
    def put(self, request: Request, name: str) -> Response:
        route = self.route(name)
        data = request.data
        if isinstance(data, dict):
            data = {"name": name, **data}
        spec = validate_route_spec(data)
        return Response(route_representation(services.update_route(route=route, spec=spec)))

    @extend_schema(
        request=dict, responses={200: dict}, summary="Change part of a route (JSON merge patch)"
    )
    def patch(self, request: Request, name: str) -> Response:
        route = self.route(name)
        if not isinstance(request.data, dict):
            raise invalid_request("expected a JSON object (a merge patch of the route)")
        current = {
            "name": route.name,
            "description": route.description,
            "model": route.model,
            "context": route.context,
        }
        spec = validate_route_spec(merge_patch(current, request.data))
        return Response(route_representation(services.update_route(route=route, spec=spec)))

    @extend_schema(responses={204: None}, summary="Delete a route")
    def delete(self, request: Request, name: str) -> Response:
        services.delete_route(route=self.route(name))
        return Response(status=status.HTTP_204_NO_CONTENT)


def replay_summary(record: ReplayRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "route": record.route,
        "user": record.user_id or None,
        "session": record.session_key or None,
        "status": record.status,
        "format": record.format,
        "created_at": record.created_at.isoformat(),
        "ms": record.duration_ms,
        "sources": record.sources,
        "tokens": record.tokens,
        "error": record.error,
    }


def replay_detail(record: ReplayRecord) -> dict[str, Any]:
    return {
        **replay_summary(record),
        "items": record.items,
        "budget": record.budget,
        "compression": record.compression,
        "request": record.request_body,
        "rewritten_request": record.rewritten_body,
        "response_received_at": record.response_received_at.isoformat()
        if record.response_received_at
        else None,
        "response": record.response_body,
    }


def parse_time(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise invalid_request(
            f"{name}: expected an ISO 8601 time such as 2026-11-30T12:00:00Z", name
        ) from None
    if parsed.tzinfo is None:
        raise invalid_request(f"{name}: include a time zone (e.g. Z)", name)
    return parsed


class ReplayListView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(
        parameters=[
            OpenApiParameter(name, str, required=False)
            for name in ("route", "user", "status", "since", "until", "cursor", "limit")
        ],
        responses={200: dict},
        summary="Browse replay records, newest first",
    )
    def get(self, request: Request) -> Response:
        query = request.query_params
        status_filter = query.get("status") or None
        if status_filter and status_filter not in {"ok", "partial", "refused"}:
            raise invalid_request("status: must be one of ok, partial, refused", "status")
        try:
            limit = int(query.get("limit", 50))
        except ValueError:
            raise invalid_request("limit: expected a whole number", "limit") from None
        if not 1 <= limit <= 500:
            raise invalid_request("limit: must be between 1 and 500", "limit")
        page = selectors.replay_page(
            route=query.get("route") or None,
            user=query.get("user") or None,
            status=status_filter,
            since=parse_time(query.get("since"), "since"),
            until=parse_time(query.get("until"), "until"),
            cursor=query.get("cursor") or None,
            limit=limit,
        )
        return Response(
            {"data": [replay_summary(r) for r in page.records], "next_cursor": page.next_cursor}
        )


class ReplayDetailView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(responses={200: dict}, summary="One replay record")
    def get(self, request: Request, record_id: str) -> Response:
        record = selectors.replay_record(record_id)
        if record is None:
            raise not_found(f"no replay record {record_id!r}")
        return Response(replay_detail(record))
