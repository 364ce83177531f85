"""Reads of routes and replay records (the tenant is the connection's schema)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import Q, QuerySet, Subquery

from contextplatform.core.config_cache import ProcessCache
from contextplatform.core.errors import invalid_request, not_found
from contextplatform.routing.models import Recipe, ReplayRecord, Route, TenantDefaults
from contextplatform.routing.pipeline.replay_writer import flush_current_tenant

if TYPE_CHECKING:
    from contextplatform.deployments.models import Deployment
    from contextplatform.routing.configuration.schema import RouteSpec


def with_layers(routes: QuerySet[Route]) -> QuerySet[Route]:
    """Routes with the layers beneath them, their recipe and the tenant defaults, read in the same
    query (``Route.spec()`` then reads no more)."""
    defaults = TenantDefaults.objects.filter(pk=TenantDefaults.SINGLETON_ID).values("context")
    return routes.select_related("recipe").annotate(
        **{Route.DEFAULTS_ANNOTATION: Subquery(defaults[:1])}
    )


def route_by_name(name: str) -> Route | None:
    return with_layers(Route.objects.filter(name=name)).first()


def existing_route(name: str, param: str | None = "route") -> Route:
    """The route named ``name``, or the API's 404 naming the field that asked for it."""
    route = route_by_name(name)
    if route is None:
        raise not_found(f"route {name!r} does not exist", param)
    return route


@dataclass(frozen=True)
class LoadedRoute:
    """A route read once with its validated spec, for a caller that checks it before resolving
    (the gateway) and hands it to the resolve so neither the read nor the validation repeats."""

    route: Route
    spec: RouteSpec
    # The route's upstream deployment, when the caller read it already (the gateway does).
    deployment: Deployment | None = None


ROUTES = "routes"
# Every resolve and gateway call reads its route: kept per process and tenant schema, dropped
# when a route, a recipe or the tenant defaults change (routing.signals).
_loaded_routes: ProcessCache[tuple[str, str], LoadedRoute | None] = ProcessCache(ROUTES)


def loaded_route(name: str, param: str | None = "route") -> LoadedRoute:
    """The route with its validated spec. The result is shared by this process's requests: read
    it, never change it."""
    loaded = _loaded_routes.get((connection.schema_name, name), lambda: _load_route(name))
    if loaded is None:
        raise not_found(f"route {name!r} does not exist", param)
    return loaded


def _load_route(name: str) -> LoadedRoute | None:
    route = route_by_name(name)
    return LoadedRoute(route, route.spec()) if route is not None else None


def all_routes() -> QuerySet[Route]:
    return with_layers(Route.objects.order_by("name"))


def recipe_by_name(name: str) -> Recipe | None:
    return Recipe.objects.filter(name=name).first()


def tenant_defaults() -> dict[str, Any]:
    """The tenant's default context configuration (empty when none was ever written)."""
    return TenantDefaults.current_context()


def routes_layered_on(*, defaults_changed: bool, recipes: set[str]) -> QuerySet[Route]:
    """The routes whose effective configuration a change of the defaults or of recipes touches."""
    routes = all_routes()
    return routes if defaults_changed else routes.filter(recipe__name__in=recipes)


def latest_replay_records(limit: int) -> list[ReplayRecord]:
    """The tenant's newest replay records, newest first, with what the dashboard reads of them."""
    return list(
        ReplayRecord.objects.only("route", "created_at", "sources").order_by("-created_at", "-id")[
            :limit
        ]
    )


def replay_record(record_id: str) -> ReplayRecord | None:
    flush_current_tenant()
    return ReplayRecord.objects.filter(pk=record_id).first()


@dataclass(frozen=True)
class ReplayPage:
    records: list[ReplayRecord]
    next_cursor: str | None


def encode_cursor(record: ReplayRecord) -> str:
    raw = json.dumps([record.created_at.isoformat(), record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, record_id = json.loads(base64.urlsafe_b64decode(padded))
        return datetime.fromisoformat(created), str(record_id)
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise invalid_request("cursor: not a cursor this API returned", "cursor") from None


def replay_page(
    *,
    route: str | None = None,
    user: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> ReplayPage:
    """Newest first, keyset-paginated on (created_at, id)."""
    flush_current_tenant()
    records = ReplayRecord.objects.all()
    if route:
        records = records.filter(route=route)
    if user:
        records = records.filter(user_id=user)
    if status:
        records = records.filter(status=status)
    if since:
        records = records.filter(created_at__gte=since)
    if until:
        records = records.filter(created_at__lt=until)
    if cursor:
        created, record_id = decode_cursor(cursor)
        records = records.filter(
            Q(created_at__lt=created) | Q(created_at=created, id__lt=record_id)
        )
    page = list(records.order_by("-created_at", "-id")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    return ReplayPage(
        records=page, next_cursor=encode_cursor(page[-1]) if has_more and page else None
    )
