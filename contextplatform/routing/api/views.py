"""HTTP endpoints of routes, resolve and replay. Thin: parse, call a service or selector, present."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Literal

import yaml
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import ApiError, invalid_request, not_found
from contextplatform.core.views import ApiView
from contextplatform.routing import selectors, services
from contextplatform.routing.configuration.schema import (
    RouteSpec,
    parse_config_document,
    recipe_document,
    route_document,
)
from contextplatform.routing.models import ReplayRecord, Route
from contextplatform.routing.pipeline.preview import preview_route
from contextplatform.routing.pipeline.resolver import resolve
from contextplatform.routing.pipeline.turns import begin_memory_turn, begin_turn, complete_turn


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
    """``context`` is the effective configuration resolve runs (tenant defaults, recipe, route);
    ``own_context`` what the route writes itself (what PUT, PATCH and export work on)."""
    representation = {
        "name": route.name,
        "description": route.description,
        "model": route.model,
        "recipe": route.recipe.name if route.recipe_id is not None else None,
        "context": route.context,
        "own_context": route.context,
        "created_at": route.created_at.isoformat(),
        "updated_at": route.updated_at.isoformat(),
    }
    try:
        representation["context"] = route.spec().context.model_dump(mode="json")
    except ApiError as error:  # e.g. a source kind removed since: show what is stored
        representation["invalid"] = error.message
    return representation


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
            allowlist=tenant.outbound_allowlist,
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
                allowlist=tenant.outbound_allowlist,
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
        routes = [route_representation(r) for r in selectors.all_routes()]
        return Response({"data": routes})

    @extend_schema(request=RouteSpec, responses={201: dict}, summary="Create a route")
    def post(self, request: Request) -> Response:
        prepared = services.prepare_route(request.data)
        route = services.create_route(
            spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe
        )
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
        return selectors.existing_route(name, param=None)

    @extend_schema(responses={200: dict}, summary="Read a route")
    def get(self, request: Request, name: str) -> Response:
        return Response(route_representation(self.route(name)))

    @extend_schema(request=RouteSpec, responses={200: dict}, summary="Replace a route")
    def put(self, request: Request, name: str) -> Response:
        route = self.route(name)
        data = request.data
        if isinstance(data, dict):
            data = {"name": name, **data}
        return Response(route_representation(self.save(route, data)))

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
            "recipe": route.recipe.name if route.recipe_id is not None else None,
            "context": route.context,
        }
        return Response(route_representation(self.save(route, merge_patch(current, request.data))))

    @staticmethod
    def save(route: Route, data: Any) -> Route:
        prepared = services.prepare_route(data)
        return services.update_route(
            route=route, spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe
        )

    @extend_schema(responses={204: None}, summary="Delete a route")
    def delete(self, request: Request, name: str) -> Response:
        services.delete_route(route=self.route(name))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- configuration as code ---------------------------------------------------------------------

EXPORT_FORMATS = ("yaml", "json")
MAX_DOCUMENT_VALUES = 200_000
MAX_DOCUMENT_DEPTH = 64


def export_document(route: Route) -> dict[str, Any]:
    """The route in the seed's form, with its recipe so the document imports on its own."""
    document: dict[str, Any] = {
        "routes": [
            route_document(
                name=route.name,
                description=route.description,
                model=route.model,
                recipe=route.recipe.name if route.recipe_id is not None else None,
                context=route.context,
            )
        ]
    }
    if route.recipe_id is not None:
        document["recipes"] = [
            recipe_document(name=route.recipe.name, context=route.recipe.context)
        ]
    return document


def dump_yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _load_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as error:
        raise invalid_request(f"body: not valid JSON: {error}") from None


def _load_yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise invalid_request(f"body: not valid YAML: {problem}{where}") from None


def _plain(value: Any, path: str, budget: list[int], depth: int = 0) -> Any:
    """The document as JSON values (YAML also has dates, sets, binary, non-string keys, and aliases
    that repeat a subtree: the budget of values bounds what the aliases expand to)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise invalid_request(f"body: over {MAX_DOCUMENT_VALUES} values; split the document")
    if depth > MAX_DOCUMENT_DEPTH:
        raise invalid_request(f"{path or 'body'}: nested deeper than {MAX_DOCUMENT_DEPTH} levels")
    if isinstance(value, dict):
        plain: dict[str, Any] = {}
        for key, member in value.items():
            if not isinstance(key, str):
                raise invalid_request(
                    f"{path or 'body'}: key {key!r} is not text; quote it", path or None
                )
            member_path = f"{path}.{key}" if path else key
            plain[key] = _plain(member, member_path, budget, depth + 1)
        return plain
    if isinstance(value, list):
        return [_plain(item, f"{path}[{i}]", budget, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid_request(f"{path}: not a finite number", path)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    kind = type(value).__name__
    raise invalid_request(f"{path}: a YAML {kind} is not a JSON value; quote it", path or None)


def decode_document(body: bytes, content_type: str) -> Any:
    """YAML or JSON, by Content-Type, else JSON first and then YAML (the API's size limit applies
    before this reads anything)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request("body: not UTF-8 text") from None
    if not text.strip():
        raise invalid_request("body: empty; send the document as YAML or JSON")
    media_type = content_type.split(";")[0].strip().lower()
    try:
        if "json" in media_type:
            data = _load_json(text)
        elif "yaml" in media_type:
            data = _load_yaml(text)
        else:
            try:
                data = json.loads(text, parse_constant=_reject_constant)
            except ValueError:
                data = _load_yaml(text)
        return _plain(data, "", [MAX_DOCUMENT_VALUES])
    except RecursionError:
        raise invalid_request(f"body: nested deeper than {MAX_DOCUMENT_DEPTH} levels") from None


class RouteExportView(ApiView):
    required_scopes = {"GET": "routes.read"}

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        """``?format=`` picks the document's form here, not a DRF renderer; errors stay JSON."""
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=list(EXPORT_FORMATS), required=False)],
        responses={(200, "text/yaml"): OpenApiTypes.STR, (200, "application/json"): dict},
        summary="Export a route in the seed's YAML (or JSON) form",
    )
    def get(self, request: Request, name: str) -> HttpResponse:
        export_format = request.query_params.get("format", "yaml")
        if export_format not in EXPORT_FORMATS:
            raise invalid_request("format: must be yaml or json", "format")
        document = export_document(RouteDetailView.route(name))
        if export_format == "json":
            return Response(document)
        return HttpResponse(dump_yaml(document), content_type="text/yaml; charset=utf-8")


@extend_schema_view(
    get=extend_schema(exclude=True),
    put=extend_schema(exclude=True),
    patch=extend_schema(exclude=True),
    delete=extend_schema(exclude=True),
)
class RouteImportView(RouteDetailView):
    """POST imports a document; the other methods are those of a route named ``import``."""

    required_scopes = {**RouteDetailView.required_scopes, "POST": "routes.write"}

    @extend_schema(
        request={"application/yaml": OpenApiTypes.STR, "application/json": dict},
        responses={200: dict},
        summary="Import routes, recipes and defaults (YAML or JSON), all or nothing",
    )
    def post(self, request: Request, name: str = "import") -> Response:
        body = request._request.body  # the API's parser reads every body as JSON; YAML is welcome
        document = parse_config_document(decode_document(body, request.content_type or ""))
        return Response(services.import_document(document).as_dict())


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
        limit = self.query_int(request, "limit", default=50, high=500)
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
