"""Reads of routes and the layers beneath them (the tenant is the connection's schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import QuerySet, Subquery

from contextplatform.core.config_cache import ProcessCache
from contextplatform.core.errors import not_found
from contextplatform.routes.models import Recipe, Route, TenantDefaults

if TYPE_CHECKING:
    from contextplatform.deployments.models import Deployment
    from contextplatform.routes.configuration.schema import RouteSpec


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
# when a route, a recipe or the tenant defaults change (routes.signals).
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


def default_memory_extractor() -> str:
    """The extractor a memory write with no route uses (a conversation posted to a user's
    memories): the store extractor of the first memory source in the tenant's defaults, else the
    local rule-based one. A defaults layer that is not valid yet is read as far as it goes."""
    sources = tenant_defaults().get("sources")
    for source in sources if isinstance(sources, list) else []:
        if isinstance(source, dict) and source.get("type") == "memory":
            store = source.get("store")
            extractor = store.get("extractor") if isinstance(store, dict) else None
            if isinstance(extractor, str) and extractor.strip():
                return extractor
            break
    return "local"


def routes_layered_on(*, defaults_changed: bool, recipes: set[str]) -> QuerySet[Route]:
    """The routes whose effective configuration a change of the defaults or of recipes touches."""
    routes = all_routes()
    return routes if defaults_changed else routes.filter(recipe__name__in=recipes)
