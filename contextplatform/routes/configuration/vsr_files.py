"""vLLM Semantic Router's configuration files as they are, onto the platform's document form.

``POST /api/v1/routes/import`` takes the platform's document (``defaults``, ``recipes``,
``routes``) and also what vLLM Semantic Router users already have (docs/configuration.md,
"Configuration as code", the table there):

* a fragment, ``plugin: {type: context, ...}`` or ``plugins: [...]`` (a decision's plugin list),
  onto the layer the import names (``?route=NAME``, ``?recipe=NAME`` or ``?defaults=true``);
* ``global.plugins`` onto the tenant defaults;
* ``decisions`` / ``routing.decisions`` onto routes (a decision's name, description and plugins);
* ``recipes`` whose entries hold ``decisions`` (or ``routing.decisions``) onto recipes (their own
  ``plugins``) and routes layered on them;
* ``global.stores.memory``'s ``default_retrieval_limit``, ``default_similarity_threshold`` and
  ``auto_store`` onto the file's memory sources' ``store`` block (``store.auto`` for
  ``auto_store``), where they leave them unset: a source's own ``match`` still wins over them,
  as it does over the store's defaults in vLLM Semantic Router.

What such a file holds that the platform has no use for (listeners, providers, signals, a
decision's rules and model references, other plugin types, other stores...) is left out and named
in the import's ``notes``. The legacy ``rag``, ``memory`` and ``context_compression`` plugins are
kept, so that the document's check refuses them with its one-line hint. A route a decision or a
fragment lands on keeps what the file cannot say (its model settings; its recipe, unless the
decision sits in a recipe; its description, unless the decision has one). Errors name the file's
own paths (``decisions[0].plugins[1].configuration...``): ``Translated.original_paths``.

Pure: the caller hands in how to read an existing route's fields.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.routes.configuration.legacy import (
    LEGACY_PLUGINS,
    PLUGIN_ALIASES,
    hint,
    legacy_plugin_anywhere,
)

PLATFORM_KEYS = ("defaults", "recipes", "routes")
FRAGMENT_KEYS = ("plugin", "plugins")
CONTEXT = "context"

# Top-level keys of vLLM Semantic Router's files (its canonical v0.3 contract, and the flat keys
# of older files) that configure what this platform does not do: left out, with a note.
IGNORED_TOP_LEVEL: dict[str, str] = {
    "version": "the file's version",
    "listeners": "listeners are the platform's server settings",
    "providers": "providers are the tenant's deployments (/api/v1/deployments)",
    "entrypoints": "entrypoints are the platform's API",
    "setup": "setup is not a setting of this platform",
    "signals": "routing signals are not a setting of this platform",
    "model_config": "models are the tenant's deployments (/api/v1/deployments)",
    "vllm_endpoints": "endpoints are the tenant's deployments (/api/v1/deployments)",
    "provider_profiles": "providers are the tenant's deployments (/api/v1/deployments)",
    "default_model": "a route names its deployment in model.upstream",
    "reasoning_families": "reasoning settings are the model's",
    "default_reasoning_effort": "reasoning settings are the model's",
    **{
        key: "routing signals are not a setting of this platform"
        for key in (
            "keyword_rules",
            "embedding_rules",
            "categories",
            "fact_check_rules",
            "user_feedback_rules",
            "reask_rules",
            "preference_rules",
            "language_rules",
            "context_rules",
            "structure_rules",
            "complexity_rules",
            "modality_rules",
            "role_bindings",
        )
    },
}
SHAPE_KEYS = ("global", "routing", "decisions", *FRAGMENT_KEYS, *IGNORED_TOP_LEVEL)
DECISION_KEYS = ("name", "description", "plugins")
MEMORY_STORE_DEFAULTS = ("default_retrieval_limit", "default_similarity_threshold", "auto_store")
TARGETS = ("route", "recipe", "defaults")


@dataclass(frozen=True)
class ImportTarget:
    """The layer a fragment lands on: ``route``, ``recipe`` or ``defaults`` (and its name)."""

    kind: str
    name: str = ""


def import_target(params: Mapping[str, str]) -> ImportTarget | None:
    """The import's query parameters: at most one of ``route``, ``recipe``, ``defaults=true``."""
    given = [key for key in TARGETS if params.get(key)]
    if len(given) > 1:
        raise invalid_request(f"{given[1]}: name one layer ({', '.join(given)} given)", given[1])
    if not given:
        return None
    kind = given[0]
    value = params[kind]
    if kind == "defaults":
        if value.lower() not in {"true", "1", "yes"}:
            raise invalid_request("defaults: write defaults=true to import onto them", "defaults")
        return ImportTarget("defaults")
    return ImportTarget(kind, value)


@dataclass
class Translated:
    """The document in the platform's form, notes on what was left out, and for each of its paths
    the file's own (``routes[2].plugins[0]`` → ``decisions[1].plugins[3]``)."""

    document: Any
    notes: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    def original(self, param: str | None) -> str | None:
        if not param:
            return param
        for synthetic in sorted(self.paths, key=len, reverse=True):
            rest = param[len(synthetic) :]
            if param.startswith(synthetic) and (not rest or rest[0] in ".["):
                mapped = self.paths[synthetic]
                return f"{mapped}{rest}" if mapped else rest.lstrip(".") or None
        return param

    def restated(self, error: ApiError) -> ApiError:
        param = self.original(error.param)
        message = error.message
        if error.param and param != error.param and message.startswith(error.param):
            message = f"{param or 'body'}{message[len(error.param) :]}"
        return ApiError(
            error.code,
            message,
            status=error.status,
            param=param,
            also=tuple(self.restated(other) for other in error.also),
        )

    @contextmanager
    def original_paths(self) -> Iterator[None]:
        """Errors raised inside name the file's paths, not the translated document's."""
        if not self.paths:
            yield
            return
        try:
            yield
        except ApiError as error:
            raise self.restated(error) from None


RouteFields = Callable[[str], dict[str, Any] | None]


def is_vsr_file(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if any(key in data for key in SHAPE_KEYS):
        return True
    recipes = data.get("recipes")
    return isinstance(recipes, list) and any(
        isinstance(r, dict) and ("decisions" in r or "routing" in r) for r in recipes
    )


def translate(data: Any, target: ImportTarget | None, existing_route: RouteFields) -> Translated:
    """``data`` in the platform's document form; a platform document passes as it is."""
    legacy = legacy_plugin_anywhere(data)
    if legacy is not None:
        raise invalid_request(legacy[1], legacy[0])
    if not is_vsr_file(data):
        if target is not None:
            raise invalid_request(
                f"{target.kind}: only a plugin fragment (plugin: or plugins:) takes a layer to "
                "import onto; this document names its own",
                target.kind,
            )
        return Translated(document=data)
    run = _Run(existing_route=existing_route)
    if any(key in data for key in FRAGMENT_KEYS):
        run.fragment(data, target)
    else:
        if target is not None:
            raise invalid_request(
                f"{target.kind}: only a plugin fragment takes a layer to import onto; a "
                "configuration file names its own (global.plugins, decisions, recipes)",
                target.kind,
            )
        run.file(data)
    run.apply_memory_store()
    return Translated(document=run.document, notes=run.notes, paths=run.paths)


@dataclass
class _Run:
    existing_route: RouteFields
    document: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    memory_store: dict[str, Any] = field(default_factory=dict)
    # Every context plugin configuration kept, for the memory store's defaults.
    configurations: list[dict[str, Any]] = field(default_factory=list)

    def note(self, path: str, message: str) -> None:
        self.notes.append(f"{path}: {message}")

    # --- a fragment -------------------------------------------------------------------------------

    def fragment(self, data: dict[str, Any], target: ImportTarget | None) -> None:
        present = [key for key in FRAGMENT_KEYS if key in data]
        others = [key for key in data if key not in FRAGMENT_KEYS]
        if len(present) > 1 or others:
            extra = (present[1:] or others)[0]
            raise invalid_request(
                f"{extra}: a plugin fragment holds one plugin: or plugins: and nothing else",
                extra,
            )
        key = present[0]
        listed = data[key]
        if key == "plugin" and not isinstance(listed, dict):
            raise invalid_request("plugin: expected an object", "plugin")
        if key == "plugins" and not isinstance(listed, list):
            raise invalid_request("plugins: expected a list", "plugins")
        if target is None:
            raise invalid_request(
                f"{key}: a plugin fragment names no layer; import it with ?route=NAME, "
                "?recipe=NAME or ?defaults=true",
                key,
            )
        plugins = [listed] if key == "plugin" else listed
        if target.kind == "defaults":
            self.document["defaults"] = {"plugins": self.plugins(plugins, key, "defaults")}
        elif target.kind == "recipe":
            recipe = {"name": target.name, "plugins": self.plugins(plugins, key, "recipes[0]")}
            self.document["recipes"] = [recipe]
        else:
            route = self.route_entry({"name": target.name}, recipe=None)
            route["plugins"] = self.plugins(plugins, key, "routes[0]")
            self.document["routes"] = [route]
        position = {"defaults": "defaults", "recipe": "recipes[0]", "route": "routes[0]"}
        self.paths[position[target.kind]] = target.kind
        if target.kind != "defaults":
            self.paths[f"{position[target.kind]}.name"] = target.kind

    # --- a configuration file ---------------------------------------------------------------------

    def file(self, data: dict[str, Any]) -> None:
        data = copy.deepcopy(data)
        for key, what in IGNORED_TOP_LEVEL.items():
            if key in data:
                del data[key]
                self.note(key, f"{what}; ignored")
        own_routes = data.pop("routes", None)
        self.global_(data.pop("global", None), has_defaults="defaults" in data)
        routes: list[Any] = []
        recipes = data.pop("recipes", None)
        if recipes is not None:
            self.recipes(recipes, routes)
        decisions, base = data.pop("decisions", None), "decisions"
        routing = data.pop("routing", None)
        if routing is not None:
            routed = self.routing(routing, "routing")
            if routed is not None:
                if decisions is not None:
                    raise invalid_request(
                        "decisions: write the decisions once (routing.decisions or decisions)",
                        "decisions",
                    )
                decisions, base = routed, "routing.decisions"
        if decisions is not None:
            self.decisions(decisions, base, None, routes)
        if own_routes is not None:
            if not isinstance(own_routes, list):
                raise invalid_request("routes: expected a list", "routes")
            for index, route in enumerate(own_routes):
                self.paths[f"routes[{len(routes)}]"] = f"routes[{index}]"
                routes.append(route)
        if routes:
            self.document["routes"] = routes
        self.document.update(data)  # anything else: the document's check names it

    def global_(self, value: Any, *, has_defaults: bool) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise invalid_request("global: expected an object", "global")
        value = dict(value)
        plugins = value.pop("plugins", None)
        if plugins is not None:
            if has_defaults:
                raise invalid_request(
                    "global.plugins: write the tenant defaults once (defaults or global.plugins)",
                    "global.plugins",
                )
            if not isinstance(plugins, list):
                raise invalid_request("global.plugins: expected a list", "global.plugins")
            self.document["defaults"] = {
                "plugins": self.plugins(plugins, "global.plugins", "defaults")
            }
            self.paths["defaults"] = "global"
        refuse_legacy_signals(value)
        stores = value.pop("stores", None)
        for name, store in (stores or {}).items() if isinstance(stores, dict) else ():
            if name == "memory" and isinstance(store, dict) and store.get("enabled", True):
                self.memory_store = dict(store)
                self.note(
                    "global.stores.memory",
                    "memories live in the platform's database: the store's "
                    "default_retrieval_limit, default_similarity_threshold and auto_store apply "
                    "to this file's memory sources, its other settings are ignored (a file that "
                    "relied on the store alone, without memory sources: python manage.py "
                    "migrate_config FILE)",
                )
            else:
                self.note(f"global.stores.{name}", "the platform's own store serves it; ignored")
        if stores is not None and not isinstance(stores, dict):
            self.note("global.stores", "the platform's own stores serve them; ignored")
        for key in value:
            self.note(f"global.{key}", "not a setting of this platform; ignored")

    def routing(self, routing: Any, path: str) -> Any:
        """A routing profile's decisions (its signals and projections are left out)."""
        if not isinstance(routing, dict):
            raise invalid_request(f"{path}: expected an object", path)
        for key in routing:
            if key != "decisions":
                self.note(
                    f"{path}.{key}", "routing signals are not a setting of this platform; ignored"
                )
        return routing.get("decisions")

    def recipes(self, recipes: Any, routes: list[Any]) -> None:
        if not isinstance(recipes, list):
            raise invalid_request("recipes: expected a list", "recipes")
        kept: list[Any] = []
        for index, recipe in enumerate(recipes):
            path = f"recipes[{index}]"
            position = f"recipes[{len(kept)}]"
            self.paths[position] = path
            if not isinstance(recipe, dict) or not ("decisions" in recipe or "routing" in recipe):
                kept.append(recipe)  # the platform's own form
                continue
            recipe = dict(recipe)
            decisions, base = recipe.pop("decisions", None), f"{path}.decisions"
            if "routing" in recipe:
                routed = self.routing(recipe.pop("routing"), f"{path}.routing")
                if routed is not None:
                    decisions, base = routed, f"{path}.routing.decisions"
            entry: dict[str, Any] = {"name": recipe.pop("name", None)}
            if "plugins" in recipe:
                plugins = recipe.pop("plugins")
                listed = isinstance(plugins, list)
                entry["plugins"] = (
                    self.plugins(plugins, f"{path}.plugins", position) if listed else plugins
                )
            for key in recipe:
                self.note(f"{path}.{key}", "not a setting of a recipe; ignored")
            kept.append(entry)
            if decisions is not None:
                self.decisions(decisions, base, entry["name"], routes)
        if kept:
            self.document["recipes"] = kept

    def decisions(self, decisions: Any, base: str, recipe: Any, routes: list[Any]) -> None:
        """Each decision a route (layered on ``recipe`` when it sits in one), into ``routes``."""
        if not isinstance(decisions, list):
            raise invalid_request(f"{base}: expected a list", base)
        for index, decision in enumerate(decisions):
            path = f"{base}[{index}]"
            position = f"routes[{len(routes)}]"
            self.paths[position] = path
            if not isinstance(decision, dict):
                routes.append(decision)  # the document's check names it
                continue
            for key in decision:
                if key not in DECISION_KEYS:
                    self.note(f"{path}.{key}", "not a setting of a route; ignored")
            route = self.route_entry(decision, recipe=recipe)
            plugins = decision.get("plugins")
            if isinstance(plugins, list):
                route["plugins"] = self.plugins(plugins, f"{path}.plugins", position)
            elif plugins is not None:
                route["plugins"] = plugins
            routes.append(route)

    # --- the parts --------------------------------------------------------------------------------

    def route_entry(self, written: dict[str, Any], *, recipe: Any) -> dict[str, Any]:
        """A route's fields: the file's name and description; what the file cannot say (model
        settings, and the recipe outside recipes) kept from the route when it exists."""
        name = written.get("name")
        existing = self.existing_route(name) if isinstance(name, str) and name else None
        route: dict[str, Any] = {"name": name}
        if existing is not None:
            route["description"] = existing.get("description", "")
            route["model"] = existing.get("model") or {}
            route["recipe"] = existing.get("recipe")
            if existing.get("variants"):  # a fragment writes the route's context, not its arms
                route["variants"] = [
                    {
                        "name": variant.get("name"),
                        "weight": variant.get("weight"),
                        "plugins": [{"type": "context", "configuration": variant.get("context")}],
                    }
                    for variant in existing["variants"]
                ]
        if "description" in written:
            route["description"] = written["description"]
        if recipe is not None:
            route["recipe"] = recipe
        return route

    def plugins(self, plugins: list[Any], base: str, position: str) -> list[Any]:
        """The plugins the platform reads (context, and the legacy ones its check refuses with
        the hint); the others are named in the notes. ``base`` is the list's path in the file
        (``plugin`` for a one-plugin fragment), ``position`` the layer's in the document."""
        self.paths[f"{position}.plugins"] = base
        kept: list[Any] = []
        for index, plugin in enumerate(plugins):
            path = base if base == "plugin" else f"{base}[{index}]"
            kind = plugin.get("type") if isinstance(plugin, dict) else None
            kind = PLUGIN_ALIASES.get(str(kind), kind)
            if isinstance(plugin, dict) and kind not in {CONTEXT, *LEGACY_PLUGINS}:
                self.note(path, f"the {kind!r} plugin is not one of this platform's; ignored")
                continue
            self.paths[f"{position}.plugins[{len(kept)}]"] = path
            if kind == CONTEXT and isinstance(plugin.get("configuration"), dict):
                self.configurations.append(plugin["configuration"])
            kept.append(plugin)
        return kept

    def apply_memory_store(self) -> None:
        """The store's defaults, where the file's memory sources leave them to it."""
        store = self.memory_store
        limit = store.get("default_retrieval_limit")
        threshold = store.get("default_similarity_threshold")
        auto = store.get("auto_store")
        for configuration in self.configurations:
            sources = configuration.get("sources")
            for source in sources if isinstance(sources, list) else []:
                if not isinstance(source, dict) or source.get("type") != "memory":
                    continue
                written = source.get("store")
                found = dict(written) if isinstance(written, dict) else {}
                # The store's own fields: a match block the source writes still wins over them,
                # and what the file leaves unset stays the embedder's default.
                for key, value in (
                    ("default_retrieval_limit", limit),
                    ("default_similarity_threshold", threshold),
                    ("auto", auto),
                ):
                    if value is not None and key not in found:
                        found[key] = value
                if found:
                    source["store"] = found


def refuse_legacy_signals(value: dict[str, Any]) -> None:
    """``prompt_compression`` under ``global.model_catalog.modules`` (or ``global.modules``) is
    the legacy form of the defaults' ``compress.signals``: refused with the hint."""
    for keys in (("model_catalog", "modules"), ("modules",)):
        holder: Any = value
        for key in keys:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and "prompt_compression" in holder:
            param = "global." + ".".join((*keys, "prompt_compression"))
            raise invalid_request(
                hint(param, "prompt_compression is now compress.signals of the defaults"), param
            )
