"""The typed schema of a route: model settings and the context configuration (seed shape).

Unknown fields are refused. Each source is validated by its kind's own settings model, found in
the source-kind registry, so new kinds need no change here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, model_validator

from compression.config import CompressConfig
from contextplatform.api.errors import ApiError
from contextplatform.api.validation import parse
from sources.base import SOURCE_KINDS, SourceSettings, source_kind

ROUTE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetConfig(Strict):
    max_tokens: Literal["auto"] | int = Field(default="auto", description="input tokens, or auto")
    reserve_output_tokens: Literal["auto"] | int = "auto"
    context_tokens: int | None = Field(
        default=None, ge=1, description="cap on injected context; default 40% of the input budget"
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
    url: str = Field(min_length=1, max_length=2000)
    model: str | None = None
    api_key_env: str | None = Field(
        default=None, description="environment variable holding the key"
    )
    timeout_ms: int = Field(default=60_000, ge=1, le=600_000)


class ModelSettings(Strict):
    name: str | None = Field(default=None, max_length=200)
    context_window: int = Field(default=128_000, ge=256, le=10_000_000)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    upstream: UpstreamConfig | None = None

    @model_validator(mode="after")
    def output_fits_window(self) -> ModelSettings:
        if self.max_output_tokens is not None and self.max_output_tokens >= self.context_window:
            raise ValueError("max_output_tokens must be lower than context_window")
        return self


class RouteSpec(Strict):
    name: str = Field(pattern=ROUTE_NAME_PATTERN)
    description: str = Field(default="", max_length=2000)
    model: ModelSettings = Field(default_factory=ModelSettings)
    context: ContextConfig = Field(default_factory=ContextConfig)


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


def validate_route_spec(data: Any, *, prefix: str = "", stored: bool = False) -> RouteSpec:
    """Validate a whole route; errors name the offending field, e.g. ``context.sources[1].priority``.

    ``stored`` is for routes read back from the database: checks against the deployment's current
    environment (such as configured judge deployments) were made when the route was saved, and a
    route that no longer passes them still loads; its sources then fail by their own rules."""
    if not isinstance(data, dict):
        raise ApiError("invalid_request", "route: expected a JSON object")
    context = data.get("context")
    sources_data = context.get("sources") if isinstance(context, dict) else None
    # Validate everything but the sources first, then each source against its own kind.
    shallow = dict(data)
    if isinstance(context, dict):
        shallow["context"] = {**context, "sources": []}
    spec = parse(RouteSpec, shallow, prefix=prefix)
    if sources_data is None:
        return spec
    base = f"{prefix + '.' if prefix else ''}context.sources"
    if not isinstance(sources_data, list):
        raise ApiError("invalid_request", f"{base}: expected a list", param=base)
    if len(sources_data) > 32:
        raise ApiError("invalid_request", f"{base}: at most 32 sources", param=base)
    sources = [
        validate_source(item, prefix=f"{base}[{index}]", stored=stored)
        for index, item in enumerate(sources_data)
    ]
    seen: set[str] = set()
    for index, source in enumerate(sources):
        name = source.name or source.type
        if name in seen:
            raise ApiError(
                "invalid_request",
                f"{base}[{index}].name: duplicate source name {name!r}; give each source its own name",
                param=f"{base}[{index}].name",
            )
        seen.add(name)
    spec.context.sources = sources
    return spec
