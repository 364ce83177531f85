"""Writes of routes."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from contextplatform.api.errors import ApiError
from contextplatform.routing.config import RouteSpec
from contextplatform.routing.models import Route


def _fields(spec: RouteSpec) -> dict[str, Any]:
    dumped = spec.model_dump(mode="json")
    return {
        "description": spec.description,
        "context_window": spec.model.context_window,
        "max_output_tokens": spec.model.max_output_tokens,
        "model": dumped["model"],
        "context": dumped["context"],
    }


def create_route(*, spec: RouteSpec) -> Route:
    try:
        with transaction.atomic():
            return Route.objects.create(name=spec.name, **_fields(spec))
    except IntegrityError:
        raise ApiError(
            "conflict", f"route {spec.name!r} already exists", status=409, param="name"
        ) from None


def update_route(*, route: Route, spec: RouteSpec) -> Route:
    if spec.name != route.name and Route.objects.filter(name=spec.name).exists():
        raise ApiError("conflict", f"route {spec.name!r} already exists", status=409, param="name")
    route.name = spec.name
    for field, value in _fields(spec).items():
        setattr(route, field, value)
    route.save()
    return route


def upsert_route(*, spec: RouteSpec) -> Route:
    route = Route.objects.filter(name=spec.name).first()
    return update_route(route=route, spec=spec) if route else create_route(spec=spec)


def delete_route(*, route: Route) -> None:
    route.delete()
