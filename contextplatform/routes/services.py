"""Writes of routes, recipes and the tenant defaults, and the import of a configuration document."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from contextplatform.core import secrets
from contextplatform.core.config_cache import changed
from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.core.validation import parse
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import (
    DEPLOYMENT_NAME_PATTERN,
    DeploymentSpec,
    provider_of,
)
from contextplatform.deployments.selectors import deployment_named
from contextplatform.deployments.services import key_change, parse_deployment, upsert_deployment
from contextplatform.routes import selectors
from contextplatform.routes.configuration.layering import effective_context, layered_variants
from contextplatform.routes.configuration.schema import (
    ConfigDocument,
    LayerEntry,
    RecipeEntry,
    RouteEntry,
    RouteSpec,
    UpstreamConfig,
    validate_context,
    validate_route_spec,
)
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from sources import secret_settings
from sources.models import Collection


@dataclass(frozen=True)
class PreparedRoute:
    """A route ready to save: its effective spec (validated) and the layer it writes itself."""

    spec: RouteSpec
    layer: dict[str, Any]
    recipe: Recipe | None
    # The variants as written: each one's own context layer, not the layered one.
    variants: list[dict[str, Any]] = field(default_factory=list)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _recipe_named(name: Any, param: str) -> Recipe | None:
    if not isinstance(name, str):
        return None  # absent, null, or not a name: validation reports the last
    recipe = selectors.recipe_by_name(name)
    if recipe is None:
        raise invalid_request(f"{param}: no recipe named {name!r} in this tenant", param)
    return recipe


def prepare_route(
    data: Any,
    *,
    prefix: str = "",
    context_prefix: str | None = None,
    defaults: dict[str, Any] | None = None,
) -> PreparedRoute:
    """Layer a written route (``context`` is its own layer) on its recipe and the tenant defaults,
    and validate the effective route; errors name the written field."""
    if not isinstance(data, dict):
        raise invalid_request(f"{prefix or 'route'}: expected a JSON object", prefix or None)
    data, inline_upstream = named_upstream(data, prefix)
    layer = data.get("context", {})
    context_param = context_prefix or _join(prefix, "context")
    if not isinstance(layer, dict):
        raise invalid_request(f"{context_param}: expected a JSON object", context_param)
    refuse_route_signals(layer, context_param)
    written_variants = data.get("variants")
    for index, variant in enumerate(written_variants if isinstance(written_variants, list) else []):
        if isinstance(variant, dict) and isinstance(variant.get("context"), dict):
            refuse_route_signals(variant["context"], _join(prefix, f"variants[{index}].context"))
    recipe = _recipe_named(data.get("recipe"), _join(prefix, "recipe"))
    inherited = selectors.tenant_defaults() if defaults is None else defaults
    recipe_layer = recipe.context if recipe else None
    context = effective_context(inherited, recipe_layer, layer)
    variants = layered_variants(written_variants, inherited, recipe_layer)
    spec = validate_route_spec(
        {**data, "context": context, **({"variants": variants} if "variants" in data else {})},
        prefix=prefix,
        context_prefix=context_prefix,
    )
    check_collections(context, context_param, inherited_from=sources_layer(layer, recipe))
    for index, variant in enumerate(variants or []):
        own = written_variants[index].get("context") or {}
        check_collections(
            variant["context"],
            _join(prefix, f"variants[{index}].context"),
            inherited_from=sources_layer(own, recipe),
        )
    if inline_upstream is not None:
        # Written only once the whole route validates; the same route writes the same one.
        upsert_deployment(spec=inline_upstream, api_key=key_change(inline_upstream))
    else:
        check_upstream(spec, _join(prefix, "model.upstream"))
    return PreparedRoute(
        spec=spec,
        layer=layer,
        recipe=recipe,
        variants=[
            {"name": v["name"], "weight": v["weight"], "context": v.get("context") or {}}
            for v in written_variants or []
        ],
    )


def check_collections(
    context: dict[str, Any], context_param: str, inherited_from: str | None
) -> None:
    """A ``vectorstore`` source names collections of the tenant: one that does not exist would
    fail that source at every resolve, so the route is refused at save time, as an unknown
    deployment is (docs/configuration.md, "RAG sources"). ``inherited_from`` names the layer that
    wrote the sources when the route does not write them itself. One query for every name the
    sources use, not one per name."""
    named = [
        (index, source, path, name)
        for index, source in enumerate(context.get("sources") or [])
        for path, name in collection_names(source)
    ]
    if not named:
        return
    existing = set(
        Collection.objects.filter(name__in={name for *_, name in named}).values_list(
            "name", flat=True
        )
    )
    for index, source, path, name in named:
        if name in existing:
            continue
        if inherited_from is None:
            param = f"{context_param}.sources[{index}].{path}"
            raise invalid_request(f"{param}: no collection named {name!r} in this tenant", param)
        param = f"{context_param}.sources"
        raise invalid_request(
            f"{param}: source {source.get('name') or index!r}, inherited from {inherited_from}, "
            f"names no collection {name!r} in this tenant ({path})",
            param,
        )


def collection_names(source: Any) -> list[tuple[str, str]]:
    """The collections a rag source reads from the platform's own store (``vectorstore``, or a
    hybrid's vectorstore parts), each with the path of the field naming it inside the source."""
    if not isinstance(source, dict) or source.get("type") != "rag":
        return []
    return backend_collections(source, "backend_config")


def backend_collections(part: Any, at: str) -> list[tuple[str, str]]:
    config = part.get("backend_config") if isinstance(part, dict) else None
    if not isinstance(config, dict):
        return []
    backend = part.get("backend", "vectorstore")
    if backend == "hybrid":
        return [
            found
            for name in ("primary", "fallback")
            for found in backend_collections(config.get(name), f"{at}.{name}.backend_config")
        ]
    if backend != "vectorstore":
        return []
    found = []
    if isinstance(config.get("collection"), str):
        found.append((f"{at}.collection", config["collection"]))
    for position, name in enumerate(config.get("collections") or []):
        if isinstance(name, str):
            found.append((f"{at}.collections[{position}]", name))
    return found


def sources_layer(layer: dict[str, Any], recipe: Recipe | None) -> str | None:
    """Which layer wrote a route's effective sources: ``None`` for the route itself."""
    if "sources" in layer:
        return None
    if recipe is not None and "sources" in recipe.context:
        return f"recipe {recipe.name!r}"
    return "the tenant defaults"


def named_upstream(
    data: dict[str, Any], prefix: str
) -> tuple[dict[str, Any], DeploymentSpec | None]:
    """A route written with the first version's inline upstream object (``UpstreamConfig``),
    rewritten to name a deployment of its own, ``<route>-upstream``, with that deployment's
    validated spec (saved by the caller once the whole route validates)."""
    model = data.get("model")
    upstream = model.get("upstream") if isinstance(model, dict) else None
    if not isinstance(model, dict) or not isinstance(upstream, dict):
        return data, None
    param = _join(prefix, "model.upstream")
    legacy = parse(UpstreamConfig, upstream, prefix=param)
    name = data.get("name")
    if not isinstance(name, str):
        return {**data, "model": {**model, "upstream": None}}, None  # the name's error comes
    deployment = legacy.deployment_data(name, model)
    if re.fullmatch(DEPLOYMENT_NAME_PATTERN, deployment["name"]) is None:
        raise invalid_request(
            f"{param}: the route's name is too long to name a deployment after it; create a "
            "deployment and give its name here",
            param,
        )
    spec = parse_deployment(deployment, prefix=param)
    return {**data, "model": {**model, "upstream": spec.name}}, spec


def check_upstream(spec: RouteSpec, param: str) -> None:
    """A route's ``model.upstream`` names deployments of the tenant, which all speak one
    provider's protocols: the gateway does not translate between providers, so a fallback must
    serve what the first deployment serves (OpenAI's Chat Completions and Responses deployments
    mix: the gateway translates between those two)."""
    listed = isinstance(spec.model.upstream, list)
    first: Deployment | None = None
    for index, name in enumerate(spec.model.upstreams):
        at = f"{param}[{index}]" if listed else param
        deployment = deployment_named(name)
        if deployment is None:
            raise invalid_request(f"{at}: no deployment named {name!r}", at)
        if first is None:
            first = deployment
        elif provider_of(deployment.protocol) != provider_of(first.protocol):
            raise invalid_request(
                f"{at}: the deployment {name!r} speaks {deployment.protocol}, but the first one, "
                f"{first.name!r}, speaks {first.protocol}: the fallbacks of a route must speak "
                "one provider's protocol (openai and openai_responses mix; the gateway does not "
                "translate between providers)",
                at,
            )


def refuse_route_signals(layer: dict[str, Any], context_param: str) -> None:
    """The routing signals read the request before a route is chosen, so only the tenant defaults
    and a recipe set ``compress.signals``; a route's own context refuses it (it still inherits
    them). vLLM Semantic Router's context plugin has the same rule for a decision's plugin."""
    compress = layer.get("compress")
    if isinstance(compress, dict) and "signals" in compress:
        param = f"{context_param}.compress.signals"
        raise invalid_request(
            f"{param}: the routing signals read the request before a route is chosen, so "
            "compress.signals belongs in the tenant defaults or a recipe, not in a route",
            param,
        )


def own_layer(spec: RouteSpec) -> dict[str, Any]:
    """What a spec validated on its own writes (its defaults left out, so they stay inherited)."""
    return spec.context.model_dump(mode="json", exclude_unset=True)


def _fields(
    spec: RouteSpec,
    layer: dict[str, Any] | None,
    recipe: Recipe | None,
    stored: dict[str, Any] | None = None,
    variants: list[dict[str, Any]] | None = None,
    stored_variants: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The columns of a route; its layer as stored (secrets sealed against ``stored``, the layer
    it replaces: ``sources.secret_settings``), each variant's against the stored variant of the
    same name."""
    written = own_layer(spec) if layer is None else layer
    if variants is None:
        variants = [
            {
                "name": v.name,
                "weight": v.weight,
                "context": v.context.model_dump(mode="json", exclude_unset=True),
            }
            for v in spec.variants
        ]
    before = {v.get("name"): v.get("context") for v in stored_variants or [] if isinstance(v, dict)}
    return {
        "variants": [
            {**v, "context": secret_settings.seal(v["context"], before.get(v["name"]))}
            for v in variants
        ],
        "description": spec.description,
        "context_window": spec.model.context_window,
        "max_output_tokens": spec.model.max_output_tokens,
        "model": spec.model.stored(),
        "context": secret_settings.seal(written, stored),
        "recipe": recipe if recipe is not None else _recipe_named(spec.recipe, "recipe"),
    }


def create_route(
    *,
    spec: RouteSpec,
    layer: dict[str, Any] | None = None,
    recipe: Recipe | None = None,
    variants: list[dict[str, Any]] | None = None,
) -> Route:
    """Save a new route; ``layer`` is what it writes (default: what ``spec`` was given), and
    ``variants`` the variants as written (each with its own context layer)."""
    fields = _fields(spec, layer, recipe, variants=variants)
    try:
        with transaction.atomic():
            return Route.objects.create(name=spec.name, **fields)
    except IntegrityError:
        raise ApiError(
            "conflict", f"route {spec.name!r} already exists", status=409, param="name"
        ) from None


def update_route(
    *,
    route: Route,
    spec: RouteSpec,
    layer: dict[str, Any] | None = None,
    recipe: Recipe | None = None,
    variants: list[dict[str, Any]] | None = None,
) -> Route:
    if spec.name != route.name and Route.objects.filter(name=spec.name).exists():
        raise ApiError("conflict", f"route {spec.name!r} already exists", status=409, param="name")
    stored = route.context
    route.name = spec.name
    fields = _fields(spec, layer, recipe, stored, variants, stored_variants=route.variants)
    for name, value in fields.items():
        setattr(route, name, value)
    route.save()
    return route


def upsert_route(
    *,
    spec: RouteSpec,
    layer: dict[str, Any] | None = None,
    recipe: Recipe | None = None,
    variants: list[dict[str, Any]] | None = None,
) -> Route:
    route = Route.objects.filter(name=spec.name).first()
    if route:
        return update_route(route=route, spec=spec, layer=layer, recipe=recipe, variants=variants)
    return create_route(spec=spec, layer=layer, recipe=recipe, variants=variants)


def delete_route(*, route: Route) -> None:
    route.delete()


def save_defaults(*, context: dict[str, Any]) -> TenantDefaults:
    sealed = secret_settings.seal(context, TenantDefaults.current_context())
    defaults, _ = TenantDefaults.objects.update_or_create(
        pk=TenantDefaults.SINGLETON_ID, defaults={"context": sealed}
    )
    return defaults


def upsert_recipe(*, name: str, context: dict[str, Any]) -> tuple[Recipe, bool]:
    stored = Recipe.objects.filter(name=name).values_list("context", flat=True).first()
    sealed = secret_settings.seal(context, stored)
    return Recipe.objects.update_or_create(name=name, defaults={"context": sealed})


# --- import -------------------------------------------------------------------------------------


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)
    created: int = 0
    updated: int = 0
    recipes: list[str] = field(default_factory=list)
    defaults: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "created": self.created,
            "updated": self.updated,
            "recipes": self.recipes,
            "defaults": self.defaults,
        }


def import_document(document: ConfigDocument) -> ImportResult:
    """Upsert the document's defaults, recipes and routes in one transaction: all or nothing.

    Routes not in the document but layered on changed defaults or recipes must still validate."""
    try:
        with transaction.atomic():
            return _import(document)
    except IntegrityError:
        raise ApiError(
            "conflict",
            "another change to these routes or recipes was saved at the same time; try again",
            status=409,
        ) from None


class _CheckedOnly(Exception):
    """Raised to roll back a check's writes."""


def check_document(document: ConfigDocument) -> None:
    """Raise the ApiError ``import_document`` would raise, saving nothing (the admin validates a
    recipe or the tenant defaults this way before saving them, with the routes layered on them)."""
    try:
        with transaction.atomic():
            _import(document)
            raise _CheckedOnly
    except _CheckedOnly:
        return
    except IntegrityError:
        return  # a concurrent write: the save itself reports the conflict


def _import(document: ConfigDocument) -> ImportResult:
    result = ImportResult()
    defaults = _import_defaults(document.defaults, result)
    for recipe in document.recipes:
        _import_recipe(recipe, defaults, result)
    for route in document.routes:
        _import_route(route, defaults, result)
    _check_routes_left_out(document, defaults)
    return result


def _import_defaults(entry: LayerEntry | None, result: ImportResult) -> dict[str, Any]:
    if entry is None:
        return selectors.tenant_defaults()
    validate_context(entry.context, prefix=entry.context_path)
    save_defaults(context=entry.context)
    result.defaults = True
    return entry.context


def _import_recipe(entry: RecipeEntry, defaults: dict[str, Any], result: ImportResult) -> None:
    validate_context(effective_context(defaults, entry.context), prefix=entry.context_path)
    upsert_recipe(name=entry.name, context=entry.context)
    result.recipes.append(entry.name)


def _import_route(entry: RouteEntry, defaults: dict[str, Any], result: ImportResult) -> None:
    prepared = prepare_route(
        {**entry.route, "context": entry.context},
        prefix=entry.path,
        context_prefix=entry.context_path,
        defaults=defaults,
    )
    existing = Route.objects.filter(name=prepared.spec.name).first()
    if existing is None:
        create_route(
            spec=prepared.spec,
            layer=prepared.layer,
            recipe=prepared.recipe,
            variants=prepared.variants,
        )
        result.created += 1
    else:
        update_route(
            route=existing,
            spec=prepared.spec,
            layer=prepared.layer,
            recipe=prepared.recipe,
            variants=prepared.variants,
        )
        result.updated += 1
    result.imported.append(prepared.spec.name)


def _check_routes_left_out(document: ConfigDocument, defaults: dict[str, Any]) -> None:
    """A route the document leaves out still runs on the layers it changed: it must validate."""
    recipes = {entry.name: entry for entry in document.recipes}
    if document.defaults is None and not recipes:
        return
    imported = {entry.name for entry in document.routes}
    routes = selectors.routes_layered_on(
        defaults_changed=document.defaults is not None, recipes=set(recipes)
    )
    for route in routes.exclude(name__in=imported):
        try:
            route.spec(defaults)
        except ApiError as error:
            recipe = recipes.get(route.recipe.name) if route.recipe_id is not None else None
            layer = recipe or document.defaults
            param = layer.context_path if layer else "routes"
            raise invalid_request(
                f"{param}: route {route.name!r}, not in this document, would not validate on "
                f"it: {error.message}",
                param,
            ) from None


def rotate_source_secrets() -> int:
    """Re-encrypt every secret the sources of the current schema's routes, recipes and tenant
    defaults store under the newest key of DEPLOYMENT_SECRET_KEYS; the count. A token no key reads
    is reported (naming where it is), not skipped, as for deployments' keys."""
    rotated = 0
    with transaction.atomic():
        layers: list[tuple[str, Any]] = [
            *((f"route {r.name!r}", r) for r in Route.objects.select_for_update()),
            *((f"recipe {r.name!r}", r) for r in Recipe.objects.select_for_update()),
            *(("the tenant defaults", d) for d in TenantDefaults.objects.select_for_update()),
        ]
        for where, row in layers:
            try:
                context, count = secret_settings.rotate(row.context)
            except secrets.SecretUnreadable:
                raise invalid_request(
                    f"{where}: a source's secret is not readable with DEPLOYMENT_SECRET_KEYS; add "
                    "the key it was written with, then rotate again"
                ) from None
            if count:
                type(row).objects.filter(pk=row.pk).update(context=context)
                rotated += count
        if rotated:
            changed(
                selectors.ROUTES
            )  # an update() sends no signal; the kept specs hold the old tokens
    return rotated
