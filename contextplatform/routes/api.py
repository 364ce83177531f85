"""HTTP endpoints of routes: list, create, read, replace, merge-patch, delete, export and import.
Thin: parse, call a service or selector, present."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.core.merge_patch import merge_patch
from contextplatform.core.read_back import without_read_only
from contextplatform.core.views import ApiView, replacement_body
from contextplatform.routes import selectors, services
from contextplatform.routes.configuration.documents import (
    EXPORT_FORMATS,
    decode_document,
    dump_yaml,
)
from contextplatform.routes.configuration.schema import RouteSpec, parse_config_document
from contextplatform.routes.configuration.vsr_files import import_target, translate
from contextplatform.routes.export import export_document
from contextplatform.routes.models import Route
from sources.secret_settings import redact


def written_fields(route: Route) -> dict[str, Any]:
    """What the route writes itself, in the form PUT takes (the base of a merge patch); secrets
    as ``{"set": true}``, which a write takes to keep them."""
    return {
        "name": route.name,
        "description": route.description,
        "model": route.model,
        "recipe": route.recipe.name if route.recipe_id is not None else None,
        "context": redact(route.context),
        "variants": [
            {**variant, "context": redact(variant.get("context") or {})}
            for variant in route.variants or []
        ],
    }


# What a route's representation adds to what it writes; a write ignores them (core/read_back.py).
READ_ONLY = frozenset({"effective_context", "invalid", "version", "created_at", "updated_at"})


def route_representation(route: Route) -> dict[str, Any]:
    """``context`` is what the route writes itself (what POST, PUT, PATCH and export work on);
    ``effective_context`` the configuration resolve runs (tenant defaults, recipe, route)."""
    representation = {
        **written_fields(route),
        "version": route.version,  # how many times it was saved (evaluation runs name it)
        "created_at": route.created_at.isoformat(),
        "updated_at": route.updated_at.isoformat(),
    }
    try:
        representation["effective_context"] = redact(route.spec().context.model_dump(mode="json"))
    except ApiError as error:  # e.g. a source kind removed since: show what is stored
        representation["effective_context"] = None
        representation["invalid"] = error.message
    return representation


class RouteListView(ApiView):
    required_scopes = {"GET": "routes.read", "POST": "routes.write"}

    @extend_schema(responses={200: dict}, summary="List routes")
    def get(self, request: Request) -> Response:
        routes = [route_representation(r) for r in selectors.all_routes()]
        return Response({"data": routes})

    @extend_schema(request=RouteSpec, responses={201: dict}, summary="Create a route")
    def post(self, request: Request) -> Response:
        prepared = services.prepare_route(without_read_only(request.data, READ_ONLY))
        route = services.create_route(
            spec=prepared.spec,
            layer=prepared.layer,
            recipe=prepared.recipe,
            variants=prepared.variants,
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
        data = replacement_body(request.data, READ_ONLY, name)
        return Response(route_representation(self.save(route, data)))

    @extend_schema(
        request=dict, responses={200: dict}, summary="Change part of a route (JSON merge patch)"
    )
    def patch(self, request: Request, name: str) -> Response:
        route = self.route(name)
        if not isinstance(request.data, dict):
            raise invalid_request("expected a JSON object (a merge patch of the route)")
        patched = merge_patch(written_fields(route), without_read_only(request.data, READ_ONLY))
        return Response(route_representation(self.save(route, patched)))

    @staticmethod
    def save(route: Route, data: Any) -> Route:
        prepared = services.prepare_route(data)
        return services.update_route(
            route=route,
            spec=prepared.spec,
            layer=prepared.layer,
            recipe=prepared.recipe,
            variants=prepared.variants,
        )

    @extend_schema(responses={204: None}, summary="Delete a route")
    def delete(self, request: Request, name: str) -> Response:
        services.delete_route(route=self.route(name))
        return Response(status=status.HTTP_204_NO_CONTENT)


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
        # The same document in both forms: YAML text parses to the object JSON sends.
        responses={(200, "text/yaml"): dict, (200, "application/json"): dict},
        summary="Export a route as a YAML (or JSON) configuration document",
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
        parameters=[
            OpenApiParameter(layer, str, required=False, description="a fragment's layer")
            for layer in ("route", "recipe", "defaults")
        ],
        responses={200: dict},
        summary="Import routes, recipes and defaults (YAML or JSON), all or nothing",
    )
    def post(self, request: Request, name: str = "import") -> Response:
        body = request._request.body  # the API's parser reads every body as JSON; YAML is welcome
        # vLLM Semantic Router's own files and fragments as they are (configuration/vsr_files.py).
        translated = translate(
            decode_document(body, request.content_type or ""),
            import_target(request.query_params),
            existing_route=imported_route_fields,
        )
        with translated.original_paths():
            result = services.import_document(parse_config_document(translated.document))
        notes = {"notes": translated.notes} if translated.notes else {}
        return Response({**result.as_dict(), **notes})


def imported_route_fields(name: str) -> dict[str, Any] | None:
    """What an existing route writes, for a decision or fragment that lands on it."""
    route = selectors.route_by_name(name)
    return written_fields(route) if route is not None else None
