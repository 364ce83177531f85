"""POST /api/v1/plugins/context/compression/preview: what compression would do, never any text."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field, model_validator
from rest_framework.request import Request
from rest_framework.response import Response

from compression.config import CompressConfig, CompressMatch, CompressRecall
from compression.engine import uses_judge
from compression.views import audited
from contextplatform.core.errors import ApiError
from contextplatform.core.validation import parse
from contextplatform.core.views import ApiView
from contextplatform.resolve import modes
from contextplatform.resolve.pipeline import CompressionInputs, ResolveRequest, resolve
from contextplatform.routes.configuration.schema import (
    BudgetConfig,
    ContextConfig,
    validate_context,
)
from contextplatform.routes.selectors import existing_route


class CompressionPreviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str | None = Field(default=None, min_length=1, max_length=100)
    configuration: dict[str, Any] | None = None
    request_body: dict[str, Any]
    format: Literal["openai", "anthropic"] | None = None
    model: str | None = None
    context_window: int | None = Field(default=None, ge=256, le=10_000_000)
    max_output_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def one_configuration(self) -> CompressionPreviewBody:
        if (self.route is None) == (self.configuration is None):
            raise ValueError("give either route or configuration")
        return self


# The fields of a context plugin's whole ``configuration`` (the seed's ``enabled``, ``sources``,
# ``compress``...), none of which a compress block has: a preview takes either.
PLUGIN_FIELDS = frozenset(ContextConfig.model_fields)
DISABLED = "configuration.enabled is false: the context plugin is off, so nothing is compressed"


def plugin_compress(
    configuration: dict[str, Any], warnings: list[str]
) -> tuple[CompressConfig | None, BudgetConfig]:
    """The compress block and budget of a whole plugin ``configuration``: None when the plugin is
    off (``enabled: false``) or has no compress block, with a warning saying which."""
    plugin = validate_context(configuration, prefix="configuration")
    if not plugin.enabled:
        warnings.append(DISABLED)
        return None, plugin.budget
    if plugin.compress is None:
        warnings.append("the configuration has no compress block, so nothing is compressed")
    return plugin.compress, plugin.budget


def disabled_preview(data: Any) -> dict[str, Any] | None:
    """The answer for a plugin ``configuration`` that is off (``enabled: false``), given before
    the request body is read at all (as vLLM Semantic Router answers it): nothing would be
    compressed whatever the messages are. The configuration itself is still checked (a field it
    cannot hold is a 400 naming it). None for any other body."""
    if not isinstance(data, dict) or data.get("route") is not None:
        return None
    configuration = data.get("configuration")
    if not isinstance(configuration, dict) or configuration.get("enabled") is not False:
        return None
    validate_context(configuration, prefix="configuration")
    return {
        "valid": True,
        "applied": False,
        "skip_reason": "disabled",
        "tokens_saved": 0,
        "warnings": [DISABLED],
    }


def preview_config(
    body: CompressionPreviewBody,
) -> tuple[CompressConfig | None, BudgetConfig, int, int | None, list[str]]:
    """The compress block to preview (None: nothing is compressed), its budget, the context
    window, the model's output cap, and warnings."""
    warnings: list[str] = []
    config: CompressConfig | None
    if body.route is not None:
        spec = existing_route(body.route).spec()
        if spec.context.compress is None:
            raise ApiError(
                "invalid_request", f"route {body.route!r} has no compress block", param="route"
            )
        config, budget = spec.context.compress, spec.context.budget
        window, max_output = spec.model.context_window, spec.model.max_output_tokens
    elif PLUGIN_FIELDS & set(body.configuration or {}):
        config, budget = plugin_compress(body.configuration or {}, warnings)
        window, max_output = 128_000, None
    else:
        config = parse(CompressConfig, body.configuration, prefix="configuration")
        budget, window, max_output = BudgetConfig(), 128_000, None
    if body.context_window is not None:
        window = body.context_window
    if body.max_output_tokens is not None:
        max_output = body.max_output_tokens
    if config is None:
        return None, budget, window, max_output, warnings
    if uses_judge(config):
        warnings.append("preview ranks segments with BM25 only; the relevance judge is not called")
    config = config.model_copy(update={"match": CompressMatch(recall=CompressRecall())})
    return config, budget, window, max_output, warnings


class CompressionPreviewView(ApiView):
    required_scopes = {"POST": "compression.preview"}
    atomic_writes = False  # writes nothing; it may call a judge

    @extend_schema(
        request=CompressionPreviewBody,
        responses={200: dict},
        summary="Preview compression of a request",
    )
    def post(self, request: Request) -> Response:
        disabled = disabled_preview(request.data)
        if disabled is not None:
            audited(request, "compression.preview", 200, {"route": None, "applied": False})
            return Response(disabled)
        body = self.body(request, CompressionPreviewBody)
        config, budget_config, window, max_output, warnings = preview_config(body)
        run = resolve(
            ResolveRequest(
                tenant_schema=self.tenant(request).schema_name,
                route=body.route or "",
                request_body=body.request_body,
                chat_format=body.format,
                compression=CompressionInputs(config, budget_config, window, max_output),
            ),
            modes.COMPRESSION_PREVIEW,
        )
        budget, tokens = run.budget, run.tokens_before
        assert budget is not None
        report: dict[str, Any]
        if run.overflow is None:
            assert run.compression is not None
            report = {"valid": True, **run.compression.report}
            if DISABLED in warnings:
                report["skip_reason"] = "disabled"
        else:
            error = run.overflow
            report = {
                "valid": True,
                "applied": False,
                "tokens_before": tokens,
                "tokens_after": tokens,
                "skip_reason": "context_length_exceeded",
                "error": {"code": error.code, "message": error.message},
            }
        report.update(
            {
                "tokens_saved": max(0, report["tokens_before"] - report["tokens_after"]),
                "available_input_tokens": budget.max_input,
                "reserved_output_tokens": budget.reserved_output,
                "warnings": [*warnings, *report.get("warnings", [])],
            }
        )
        audited(
            request,
            "compression.preview",
            200,
            {"route": body.route, "applied": report.get("applied")},
        )
        return Response(report)
