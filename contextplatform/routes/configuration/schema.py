"""The typed schema of a route: model settings and the context configuration.

The context configuration (sources, compress, budget, injection) has the shape of vLLM Semantic
Router's context plugin; docs/configuration.md describes each field.

Unknown fields are refused. Each source is validated by its kind's own settings model, found in
the source-kind registry, so new kinds need no change here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from compression.config import CompressConfig
from contextplatform.core.errors import ApiError, together
from contextplatform.core.validation import parse
from contextplatform.deployments.balancing import DEFAULT_STRATEGY, MAX_WEIGHT, Strategy
from contextplatform.deployments.schema import DEPLOYMENT_NAME_PATTERN
from contextplatform.routes.configuration.legacy import (
    legacy_configuration_hint,
    legacy_plugin_anywhere,
    legacy_plugin_hint,
    legacy_top_level_hint,
)
from sources.base import SOURCE_KINDS, SourceSettings, source_kind

T = TypeVar("T")

ROUTE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
RECIPE_NAME_PATTERN = ROUTE_NAME_PATTERN


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetConfig(Strict):
    max_tokens: Literal["auto"] | int = Field(default="auto", description="input tokens, or auto")
    reserve_output_tokens: Literal["auto"] | int = "auto"
    context_tokens: int | None = Field(
        default=None, ge=1, description="cap on injected context; default 40% of the input budget"
    )
    session_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="tokens (input and output) one session may spend through the gateway; "
        "none: unlimited",
    )

    @model_validator(mode="after")
    def positive_numbers(self) -> BudgetConfig:
        if isinstance(self.max_tokens, int) and self.max_tokens < 1:
            raise ValueError("max_tokens must be 'auto' or a positive number")
        if isinstance(self.reserve_output_tokens, int) and self.reserve_output_tokens < 0:
            raise ValueError("reserve_output_tokens must be 'auto' or a number >= 0")
        return self


class InjectionConfig(Strict):
    mode: Literal["tool_role", "system_prompt"] = "tool_role"


class ContextConfig(Strict):
    enabled: bool = True
    sources: list[SerializeAsAny[SourceSettings]] = Field(default_factory=list, max_length=32)
    compress: CompressConfig | None = None
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    injection: InjectionConfig = Field(default_factory=InjectionConfig)


class UpstreamConfig(Strict):
    """The first version's inline upstream of a route. Still accepted on write: the route
    service turns it into a deployment of the route's own (``legacy_upstream_name``) and stores
    that name."""

    url: str = Field(min_length=1, max_length=2000)
    model: str | None = None
    api_key_env: str | None = Field(
        default=None, description="environment variable holding the key"
    )
    timeout_ms: int = Field(default=60_000, ge=1, le=600_000)

    @field_validator("api_key_env")
    @classmethod
    def key_variable(cls, value: str | None) -> str | None:
        # A tenant names the variable, so only an API key's may be read: never SECRET_KEY,
        # DATABASE_URL or DEPLOYMENT_SECRET_KEYS, which would then be sent to the tenant's URL.
        if value is not None and (
            re.fullmatch(LEGACY_KEY_VARIABLE, value) is None or value in PLATFORM_KEY_VARIABLES
        ):
            raise ValueError(
                "must name an environment variable of the form NAME_API_KEY (the platform's "
                "own settings are never read); better, create a deployment with the key"
            )
        return value

    def deployment_data(self, route_name: str, model: dict[str, Any]) -> dict[str, Any]:
        """The deployment of the route's own this upstream becomes: OpenAI protocol (what the
        first version forwarded), the key read from the named variable now."""
        data: dict[str, Any] = {
            "name": legacy_upstream_name(route_name),
            "protocol": "openai",
            "base_url": self.url,
            "model": self.model or model.get("name") or "default",
            "timeout_ms": max(self.timeout_ms, 100),
        }
        for field in ("context_window", "max_output_tokens"):
            if isinstance(model.get(field), int):
                data[field] = model[field]
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key.strip():
            data["api_key"] = key.strip()
        return data


LEGACY_KEY_VARIABLE = r"[A-Z][A-Z0-9_]{0,90}_API_KEY"
PLATFORM_KEY_VARIABLES = frozenset({"EMBEDDING_API_KEY"})
LEGACY_UPSTREAM_SUFFIX = "-upstream"


def legacy_upstream_name(route_name: str) -> str:
    """The deployment an inline upstream of route ``route_name`` becomes."""
    return f"{route_name}{LEGACY_UPSTREAM_SUFFIX}"


MAX_UPSTREAMS = 8


def deployment_name(name: str, where: str = "") -> str:
    if re.fullmatch(DEPLOYMENT_NAME_PATTERN, name) is None:
        raise ValueError(f"{where}{name!r} is not a deployment's name")
    return name


def upstream_names(value: Any) -> list[str]:
    """The deployment names of a ``model.upstream`` as stored (a name, a list, or nothing)."""
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list):
        return [name for name in value if isinstance(name, str) and name]
    return []


class BalanceSettings(Strict):
    """Load balancing over the pool ``model.upstream`` lists: the strategy picks, per call, the
    deployment tried first; the others stay fallbacks in their order (docs/configuration.md)."""

    strategy: Strategy = Field(
        default=DEFAULT_STRATEGY,
        description="weighted (at random by weight), least_busy (fewest calls in flight) or "
        f"latency (lowest recent answer latency); default {DEFAULT_STRATEGY}",
    )
    weights: dict[str, float] | None = Field(
        default=None,
        description="the weighted strategy's weight per deployment of model.upstream (> 0; an "
        "unnamed one weighs 1)",
    )

    @field_validator("weights")
    @classmethod
    def positive_weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for name, weight in (value or {}).items():
            if not weight > 0:
                raise ValueError(f"{name!r}: a weight must be greater than 0, got {weight}")
            if weight > MAX_WEIGHT:
                raise ValueError(f"{name!r}: a weight is at most {MAX_WEIGHT:g}, got {weight}")
        return value

    @model_validator(mode="after")
    def weights_for_weighted(self) -> BalanceSettings:
        if self.weights and self.strategy != "weighted":
            raise ValueError(
                f"weights apply to the weighted strategy only; this pool's strategy is "
                f"{self.strategy!r}"
            )
        return self


class ModelSettings(Strict):
    name: str | None = Field(default=None, max_length=200)
    context_window: int = Field(default=128_000, ge=256, le=10_000_000)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    upstream: str | list[str] | None = Field(
        default=None,
        description="the name of the tenant's deployment the gateway forwards to, or a list of "
        f"names in fallback order (at most {MAX_UPSTREAMS}, no name twice)",
    )
    prompt_cache: bool = Field(
        default=False,
        description="mark the stable prefix (tools, system, the conversation so far) for the "
        "provider's prompt cache and inject context after it (Anthropic cache_control)",
    )
    balance: BalanceSettings | None = Field(
        default=None,
        description="balance calls over the deployments model.upstream lists: the strategy "
        "picks the one tried first per call, the others stay fallbacks; absent: fallback order",
    )

    @field_validator("upstream", mode="before")
    @classmethod
    def fallback_list(cls, value: Any) -> Any:
        # Checked before the union's own validation, whose errors would name its branches.
        if value is None:
            return value
        if isinstance(value, str):
            return deployment_name(value)
        if isinstance(value, list):
            for index, name in enumerate(value):
                if not isinstance(name, str):
                    raise ValueError(f"[{index}]: a deployment's name is a string")
                deployment_name(name, f"[{index}]: ")
            if not value:
                raise ValueError("name at least one deployment (or leave model.upstream out)")
            if len(value) > MAX_UPSTREAMS:
                raise ValueError(f"at most {MAX_UPSTREAMS} deployments, got {len(value)}")
            twice = sorted({name for name in value if value.count(name) > 1})
            if twice:
                raise ValueError(f"names the deployment {twice[0]!r} twice")
            return value
        raise ValueError("a deployment's name, or a list of names in fallback order")

    @property
    def upstreams(self) -> list[str]:
        """The deployments the gateway calls, in fallback order (one when a name is written)."""
        return upstream_names(self.upstream)

    @property
    def primary_upstream(self) -> str | None:
        """The first deployment: the one the resolve counts for and the default judge."""
        names = self.upstreams
        return names[0] if names else None

    @model_validator(mode="after")
    def output_fits_window(self) -> ModelSettings:
        if self.max_output_tokens is not None and self.max_output_tokens >= self.context_window:
            raise ValueError("max_output_tokens must be lower than context_window")
        return self

    @model_validator(mode="after")
    def balance_over_a_pool(self) -> ModelSettings:
        if self.balance is None:
            return self
        names = self.upstreams
        if len(names) < 2:
            raise ValueError(
                "balance: list at least two deployments in model.upstream to balance over"
            )
        unknown = sorted(set(self.balance.weights or {}) - set(names))
        if unknown:
            raise ValueError(
                f"balance.weights: names the deployment {unknown[0]!r}, which model.upstream "
                "does not list"
            )
        return self

    def stored(self) -> dict[str, Any]:
        """As a route stores it: ``balance`` only when it is set and ``prompt_cache`` only when
        on (a route without them reads back, and exports, as written)."""
        data = self.model_dump(mode="json", exclude={"balance", "prompt_cache"})
        if self.prompt_cache:
            data["prompt_cache"] = True
        if self.balance is not None:
            data["balance"] = self.balance.model_dump(mode="json", exclude_none=True)
        return data


MAIN_ARM = "main"
MAX_VARIANTS = 10
VARIANT_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,49}$"


class VariantSpec(Strict):
    """One arm of a route's traffic split: its share of the requests and the context
    configuration it runs instead of the route's own (layered on the recipe and the tenant
    defaults as the route's own is)."""

    name: str = Field(
        pattern=VARIANT_NAME_PATTERN, description="a slug; the route's own context is 'main'"
    )
    weight: float = Field(gt=0, le=1, description="the share of requests this arm takes")
    context: ContextConfig = Field(default_factory=ContextConfig)


class RouteSpec(Strict):
    name: str = Field(pattern=ROUTE_NAME_PATTERN)
    description: str = Field(default="", max_length=2000)
    model: ModelSettings = Field(default_factory=ModelSettings)
    recipe: str | None = Field(
        default=None,
        pattern=RECIPE_NAME_PATTERN,
        description="a recipe of the tenant whose context configuration this route layers on",
    )
    context: ContextConfig = Field(default_factory=ContextConfig)
    variants: list[VariantSpec] = Field(
        default_factory=list,
        max_length=MAX_VARIANTS,
        description="arms splitting the route's traffic by a stable hash of the user; the "
        "route's own context is the arm 'main' and takes what the variants leave",
    )

    def variant(self, name: str) -> VariantSpec | None:
        return next((v for v in self.variants if v.name == name), None)


def validate_source(data: Any, *, prefix: str, stored: bool = False) -> SourceSettings:
    if not isinstance(data, dict):
        raise ApiError("invalid_request", f"{prefix}: expected a JSON object", param=prefix)
    type_name = data.get("type")
    kind = source_kind(type_name) if isinstance(type_name, str) else None
    if kind is None:
        known = ", ".join(sorted(SOURCE_KINDS))
        raise ApiError(
            "invalid_request",
            f"{prefix}.type: unknown source type {type_name!r} (known: {known})",
            param=f"{prefix}.type",
        )
    return parse(kind.Settings, data, prefix=prefix, context={"stored": stored})


def _join(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if prefix else field


def validate_context(data: Any, *, prefix: str = "context", stored: bool = False) -> ContextConfig:
    """Validate a whole context configuration; errors name the field under ``prefix``, e.g.
    ``context.sources[1].priority``."""
    if not isinstance(data, dict):
        raise ApiError("invalid_request", f"{prefix}: expected a JSON object", param=prefix)
    sources_data = data.get("sources")
    # Validate everything but the sources, then each source against its own kind; every error
    # found is reported together (the API's envelope shows the first).
    problems: list[ApiError] = []
    shallow = {**data, "sources": []} if "sources" in data else data
    config = collecting(problems, parse, ContextConfig, shallow, prefix=prefix)
    sources = validate_sources(sources_data, _join(prefix, "sources"), stored, problems)
    return assembled(problems, config, sources=sources)


def validate_sources(
    sources_data: Any, base: str, stored: bool, problems: list[ApiError]
) -> list[SourceSettings] | None:
    if sources_data is None:
        return None
    if not isinstance(sources_data, list):
        raise ApiError("invalid_request", f"{base}: expected a list", param=base)
    if len(sources_data) > 32:
        raise ApiError("invalid_request", f"{base}: at most 32 sources", param=base)
    sources: list[SourceSettings] = []
    seen: set[str] = set()
    for index, item in enumerate(sources_data):
        param = f"{base}[{index}]"
        source = collecting(problems, validate_source, item, prefix=param, stored=stored)
        if source is None:
            continue
        name = source.name or source.type
        if name in seen:
            problems.append(
                ApiError(
                    "invalid_request",
                    f"{param}.name: duplicate source name {name!r}; give each source its own name",
                    param=f"{param}.name",
                )
            )
        seen.add(name)
        sources.append(source)
    return sources


def assembled(problems: list[ApiError], whole: T | None, **parts: Any) -> T:
    """``whole`` with each part that was checked set on it, or every problem raised together."""
    if problems:
        raise together(problems)
    assert whole is not None
    for name, part in parts.items():
        if part is not None:
            setattr(whole, name, part)
    return whole


def collecting(
    problems: list[ApiError], check: Callable[..., T], *args: Any, **kwargs: Any
) -> T | None:
    """``check(*args, **kwargs)``, or None with its error added to ``problems``."""
    try:
        return check(*args, **kwargs)
    except ApiError as error:
        problems.append(error)
        return None


def validate_route_spec(
    data: Any, *, prefix: str = "", stored: bool = False, context_prefix: str | None = None
) -> RouteSpec:
    """Validate a whole route; errors name the offending field, e.g. ``context.sources[1].priority``.

    ``stored`` is for routes read back from the database: checks against the deployment's current
    environment (such as configured judge deployments) were made when the route was saved, and a
    route that no longer passes them still loads; its sources then fail by their own rules.
    ``context_prefix`` names the context configuration in errors when it is not ``context`` under
    ``prefix`` (an imported document's ``routes[0].plugins[0].configuration``)."""
    if not isinstance(data, dict):
        raise ApiError("invalid_request", "route: expected a JSON object")
    if not stored:
        # A legacy plugin list pasted into a route: the hint, not "unknown field".
        pasted = {key: data[key] for key in ("plugin", "plugins") if key in data}
        legacy = legacy_plugin_anywhere(pasted)
        if legacy is not None:
            param = _join(prefix, legacy[0])
            raise _invalid(param + legacy[1].removeprefix(legacy[0]), param)
    problems: list[ApiError] = []
    route_fields = {key: value for key, value in data.items() if key not in ("context", "variants")}
    spec = collecting(problems, parse, RouteSpec, route_fields, prefix=prefix)
    context = None
    if "context" in data:
        context_param = _join(prefix, "context") if context_prefix is None else context_prefix
        context = collecting(
            problems, validate_context, data["context"], prefix=context_param, stored=stored
        )
    variants = None
    if data.get("variants") is not None:
        variants = collecting(
            problems, validate_variants, data["variants"], _join(prefix, "variants"), stored
        )
    return assembled(problems, spec, context=context, variants=variants)


def validate_variants(data: Any, base: str, stored: bool = False) -> list[VariantSpec]:
    """A route's variants, each context already layered by the caller (as the route's own is):
    names unique slugs other than ``main``, weights in (0, 1] adding up to at most 1."""
    if not isinstance(data, list):
        raise _invalid(f"{base}: expected a list", base)
    if len(data) > MAX_VARIANTS:
        raise _invalid(f"{base}: at most {MAX_VARIANTS} variants", base)
    problems: list[ApiError] = []
    variants: list[VariantSpec] = []
    seen: set[str] = set()
    for index, item in enumerate(data):
        param = f"{base}[{index}]"
        if not isinstance(item, dict):
            problems.append(_invalid(f"{param}: expected a JSON object", param))
            continue
        fields = {key: value for key, value in item.items() if key != "context"}
        variant = collecting(problems, parse, VariantSpec, fields, prefix=param)
        context = collecting(
            problems,
            validate_context,
            item.get("context", {}),
            prefix=f"{param}.context",
            stored=stored,
        )
        name = item.get("name")
        if name == MAIN_ARM:
            problems.append(
                _invalid(
                    f"{param}.name: 'main' is the route's own context; name the variant otherwise",
                    f"{param}.name",
                )
            )
        elif isinstance(name, str) and name in seen:
            problems.append(_invalid(f"{param}.name: duplicate variant {name!r}", f"{param}.name"))
        if isinstance(name, str):
            seen.add(name)
        if variant is not None and context is not None:
            variant.context = context
            variants.append(variant)
    if not problems and sum(v.weight for v in variants) > 1 + 1e-9:
        problems.append(
            _invalid(
                f"{base}: the weights add up to {sum(v.weight for v in variants):g}; at most 1 "
                "(the route's own context, 'main', takes what the variants leave)",
                base,
            )
        )
    if problems:
        raise together(problems)
    return variants


# --- configuration as code: the document form -------------------------------------------------
#
# Routes, recipes and tenant defaults as vLLM Semantic Router writes decisions, recipes and global
# plugins: each carries its context configuration as a ``context`` plugin (docs/configuration.md,
# "Configuration as code").
#
#   defaults: {plugins: [{type: context, configuration: {...}}]}        # optional
#   recipes: [{name: r, plugins: [{type: context, configuration: {...}}]}]  # optional
#   routes: [{name, description, model, recipe, plugins: [{type: context, configuration}]}]

CONTEXT_PLUGIN = "context"
DOCUMENT_KEYS = ("defaults", "recipes", "routes")
ROUTE_KEYS = ("name", "description", "model", "recipe", "plugins", "variants")
VARIANT_KEYS = ("name", "weight", "plugins")
RECIPE_KEYS = ("name", "plugins")
DEFAULTS_KEYS = ("plugins",)
PLUGIN_KEYS = ("type", "configuration")


@dataclass(frozen=True)
class LayerEntry:
    """One layer of an imported document: its own context configuration and where it sits."""

    path: str
    context: dict[str, Any]
    context_path: str


@dataclass(frozen=True)
class RecipeEntry(LayerEntry):
    name: str


@dataclass(frozen=True)
class RouteEntry(LayerEntry):
    route: dict[str, Any]  # name, description, model, recipe as written

    @property
    def name(self) -> str:
        return str(self.route.get("name"))


@dataclass(frozen=True)
class ConfigDocument:
    defaults: LayerEntry | None
    recipes: tuple[RecipeEntry, ...]
    routes: tuple[RouteEntry, ...]


def _invalid(message: str, param: str) -> ApiError:
    return ApiError("invalid_request", message, param=param)


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(f"{path}: expected an object", path)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(f"{path}: expected a list", path)
    return value


def _known_keys(data: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in data:
        if key not in allowed:
            param = _join(path, str(key))
            legacy = legacy_top_level_hint(str(key), param) if not path else None
            raise _invalid(legacy or f"{param}: unknown field (known: {', '.join(allowed)})", param)


def _context_plugin(plugins: Any, path: str) -> tuple[dict[str, Any], str]:
    """The context configuration a layer writes (``{}`` without a context plugin) and its path."""
    found: tuple[dict[str, Any], str] | None = None
    for index, plugin in enumerate(_list(plugins, f"{path}.plugins") if plugins else []):
        where = f"{path}.plugins[{index}]"
        plugin = _object(plugin, where)
        plugin_type = plugin.get("type")
        legacy = legacy_plugin_hint(plugin_type, where) if isinstance(plugin_type, str) else None
        if legacy:
            raise _invalid(legacy, where)
        if plugin_type != CONTEXT_PLUGIN:
            message = f"{where}.type: unknown plugin type {plugin_type!r} (known: context)"
            raise _invalid(message, f"{where}.type")
        _known_keys(plugin, PLUGIN_KEYS, where)
        if found is not None:
            raise _invalid(f"{where}: a second context plugin; write one per layer", where)
        configuration = _object(plugin.get("configuration", {}), f"{where}.configuration")
        removed = legacy_configuration_hint(configuration, f"{where}.configuration")
        if removed:
            raise _invalid(removed[1], removed[0])
        found = (configuration, f"{where}.configuration")
    return found or ({}, f"{path}.plugins[0].configuration")


def _named(entry: dict[str, Any], path: str, seen: set[str], kind: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise _invalid(f"{path}.name: a {kind} needs a name", f"{path}.name")
    if name in seen:
        raise _invalid(f"{path}.name: {kind} {name!r} appears twice", f"{path}.name")
    seen.add(name)
    return name


def _parse_recipe(data: Any, path: str, seen: set[str]) -> RecipeEntry:
    entry = _object(data, path)
    _known_keys(entry, RECIPE_KEYS, path)
    name = _named(entry, path, seen, "recipe")
    if re.fullmatch(RECIPE_NAME_PATTERN, name) is None:
        raise _invalid(f"{path}.name: not a valid recipe name", f"{path}.name")
    context, context_path = _context_plugin(entry.get("plugins"), path)
    return RecipeEntry(path=path, context=context, context_path=context_path, name=name)


def _parse_route(data: Any, path: str, seen: set[str]) -> RouteEntry:
    entry = _object(data, path)
    _known_keys(entry, ROUTE_KEYS, path)
    _named(entry, path, seen, "route")
    context, context_path = _context_plugin(entry.get("plugins"), path)
    route = {key: value for key, value in entry.items() if key != "plugins"}
    if "variants" in entry:
        route["variants"] = _document_variants(entry["variants"], f"{path}.variants")
    return RouteEntry(path=path, context=context, context_path=context_path, route=route)


def _document_variants(data: Any, path: str) -> list[Any]:
    """A route's variants in the document form (each one's context as its context plugin), in
    the form a route takes (each with its ``context``); the route's validation checks the rest."""
    variants = []
    for index, item in enumerate(_list(data, path)):
        where = f"{path}[{index}]"
        entry = _object(item, where)
        _known_keys(entry, VARIANT_KEYS, where)
        context, _ = _context_plugin(entry.get("plugins"), where)
        variants.append({**{k: v for k, v in entry.items() if k != "plugins"}, "context": context})
    return variants


def parse_config_document(data: Any) -> ConfigDocument:
    """Check a document's shape (not its configurations, which depend on the layers beneath)."""
    document = _object(data, "document")
    _known_keys(document, DOCUMENT_KEYS, "")
    if not any(key in document for key in DOCUMENT_KEYS):
        raise ApiError("invalid_request", "nothing to import: write routes, recipes or defaults")
    defaults = None
    if "defaults" in document:
        entry = _object(document["defaults"], "defaults")
        _known_keys(entry, DEFAULTS_KEYS, "defaults")
        context, context_path = _context_plugin(entry.get("plugins"), "defaults")
        defaults = LayerEntry(path="defaults", context=context, context_path=context_path)
    recipe_names: set[str] = set()
    recipes = tuple(
        _parse_recipe(item, f"recipes[{index}]", recipe_names)
        for index, item in enumerate(_list(document.get("recipes", []), "recipes"))
    )
    route_names: set[str] = set()
    routes = tuple(
        _parse_route(item, f"routes[{index}]", route_names)
        for index, item in enumerate(_list(document.get("routes", []), "routes"))
    )
    return ConfigDocument(defaults=defaults, recipes=recipes, routes=routes)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(member) for key, member in value.items() if member is not None}
    return value


def plugins_document(context: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": CONTEXT_PLUGIN, "configuration": context}]


def route_document(
    *,
    name: str,
    description: str,
    model: dict[str, Any],
    recipe: str | None,
    context: dict[str, Any],
    variants: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One route in the exported form: its own context configuration as the context plugin, and
    its variants (when it has any), each one's context as its own context plugin."""
    document: dict[str, Any] = {
        "name": name,
        "description": description,
        "model": _without_nulls(model),
        "recipe": recipe,
        "plugins": plugins_document(context),
    }
    if variants:
        document["variants"] = [variant_document(**variant) for variant in variants]
    return document


def variant_document(*, name: str, weight: float, context: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "weight": weight, "plugins": plugins_document(context)}


def recipe_document(*, name: str, context: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "plugins": plugins_document(context)}
