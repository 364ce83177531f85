"""The places of a tenant's configuration that name a deployment, for the deployments app's guard
(``contextplatform.deployments.usage``): deployments sits below routing and cannot read routes, so
``RoutingConfig.ready`` connects ``places_naming`` to its ``naming`` signal.

A route names a deployment in its ``model.upstream`` and, in its effective context configuration
(the tenant defaults, its recipe and its own layer merged, as resolve runs it), in a source's
``match.judge.deployment``, a memory source's ``store.extractor`` and the compress block's
``match.judge.deployment``. Recipes and the tenant defaults are reported for what their own layer
writes too, so that a layer no route uses yet does not keep a dangling name. ``"local"`` in a
judge or extractor field names the local judge or extractor, never a deployment.

The stored JSON is read as it is, unvalidated: a route that no longer validates still names what
it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextplatform.deployments.errors import NamingPlace
from contextplatform.routes.configuration.schema import upstream_names
from contextplatform.routes.models import Recipe, TenantDefaults

LOCAL = "local"


def _at(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _names(value: Any, name: str) -> bool:
    return isinstance(value, str) and value == name and value != LOCAL


def context_paths(context: Any, name: str, prefix: str = "context") -> list[str]:
    """The fields of one context configuration (a layer or a merged one) that name ``name``."""
    paths: list[str] = []
    sources = _at(context, "sources")
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        base = f"{prefix}.sources[{index}]"
        if _names(_at(source, "match", "judge", "deployment"), name):
            paths.append(f"{base}.match.judge.deployment")
        if _names(_at(source, "store", "extractor"), name):
            paths.append(f"{base}.store.extractor")
    if _names(_at(context, "compress", "match", "judge", "deployment"), name):
        paths.append(f"{prefix}.compress.match.judge.deployment")
    return paths


def places_naming(sender: Any, name: str, **kwargs: Any) -> list[NamingPlace]:
    """Every route, recipe and the tenant defaults of the current schema naming ``name``."""
    # Read here rather than at import: the receiver is connected while the apps load.
    from contextplatform.routes.selectors import all_routes

    places: list[NamingPlace] = []
    for route in all_routes():
        paths = ["model.upstream"] if name in upstream_names(_at(route.model, "upstream")) else []
        paths += context_paths(route.effective_context(), name)
        places += [NamingPlace("route", route.name, path) for path in paths]
    for recipe in Recipe.objects.order_by("name"):
        places += [
            NamingPlace("recipe", recipe.name, p) for p in context_paths(recipe.context, name)
        ]
    defaults = TenantDefaults.current_context()
    places += [NamingPlace("tenant defaults", "", p) for p in context_paths(defaults, name)]
    return places
