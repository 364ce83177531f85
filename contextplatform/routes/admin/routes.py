"""The operators' pages of a tenant's admin: routes (with their sources inline), recipes and the
tenant defaults. The route page is registered with its Preview by ``resolve.admin.preview`` (a
preview runs the pipeline, which sits above routes); the auditors' pages live in ``replay.admin``."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html

from contextplatform.core.errors import ApiError
from contextplatform.routes import selectors, services
from contextplatform.routes.admin.route_form import (
    TARGET_KEYS,
    TARGET_KINDS,
    RouteForm,
    target_field,
)
from contextplatform.routes.models import Route
from sources.secret_settings import redact
from tenants.admin import TenantOnlyAdmin

ROUTE_FIELDSETS: tuple[tuple[str | None, dict[str, Any]], ...] = (
    (None, {"fields": ("name", "description", "recipe")}),
    (
        "Model",
        {
            "fields": (
                "model_name",
                "context_window",
                "max_output_tokens",
                "upstream",
                "balance",
                "prompt_cache",
            )
        },
    ),
    (
        "Context",
        {
            "fields": ("enabled", "injection_mode", "inherit_sources"),
            "description": "A blank field inherits from the recipe and the tenant defaults; "
            "the route stores only what is written here.",
        },
    ),
    (
        "Budget",
        {
            "fields": (
                "budget_max_tokens",
                "budget_reserve_output_tokens",
                "budget_context_tokens",
                "budget_session_max_tokens",
            )
        },
    ),
    (
        "Compression",
        {
            "fields": (
                *(tuple(target_field(kind, key) for key in TARGET_KEYS) for kind in TARGET_KINDS),
                "compress",
            ),
            "description": "Per kind of content: its mode, compressed when it holds more than "
            "'from' tokens, down to 'to' tokens. A blank field inherits the value shown.",
        },
    ),
)
# Where the sources table is drawn: after this many fieldsets (see the change_form template).
SOURCES_AFTER_FIELDSETS = 3
EFFECTIVE_FIELDSET = (
    "As resolve runs it",
    {"fields": ("own_configuration", "effective_configuration"), "classes": ("collapse",)},
)
VIEW_ONLY_FIELDSETS = (
    (None, {"fields": ("name", "description", "recipe", "context_window", "max_output_tokens")}),
    (
        "Configuration",
        {"fields": ("source_summary", "own_configuration", "effective_configuration")},
    ),
)


def pretty_json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


class RouteAdmin(TenantOnlyAdmin):
    form = RouteForm
    list_display = ("name", "recipe", "source_summary", "updated_at")
    list_filter = ("recipe",)
    search_fields = ("name", "description")
    readonly_fields = ("source_summary", "own_configuration", "effective_configuration")

    def get_fieldsets(self, request: HttpRequest, obj: Route | None = None) -> Any:
        if obj is not None and not self.has_change_permission(request, obj):
            return VIEW_ONLY_FIELDSETS
        return ROUTE_FIELDSETS if obj is None else (*ROUTE_FIELDSETS, EFFECTIVE_FIELDSET)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Route]:
        """Each route with the recipe and tenant defaults it layers on, read in the same query."""
        return selectors.with_layers(super().get_queryset(request))

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        context["sources_after_fieldsets"] = SOURCES_AFTER_FIELDSETS
        return super().render_change_form(request, context, *args, **kwargs)

    def save_model(self, request: HttpRequest, obj: Route, form: RouteForm, change: bool) -> None:
        """Through the API's route service: the route's own layer, validated as resolve runs it."""
        prepared = form.prepared
        assert prepared is not None  # the form is valid
        if change:
            saved = services.update_route(
                route=Route.objects.select_related("recipe").get(pk=obj.pk),
                spec=prepared.spec,
                layer=prepared.layer,
                recipe=prepared.recipe,
                variants=prepared.variants,
            )
        else:
            saved = services.create_route(
                spec=prepared.spec,
                layer=prepared.layer,
                recipe=prepared.recipe,
                variants=prepared.variants,
            )
        obj.pk, obj.context, obj.model = saved.pk, saved.context, saved.model

    @staticmethod
    def _spec_context(route: Route) -> dict[str, Any]:
        return redact(route.spec().context.model_dump(mode="json", exclude_none=True))

    @admin.display(description="sources")
    def source_summary(self, route: Route) -> str:
        try:
            sources = self._spec_context(route)["sources"]
        except ApiError as error:
            return f"not valid: {error.message}"
        names = ", ".join(f"{s.get('name') or s['type']} ({s['priority']})" for s in sources)
        return names if "sources" in route.context else f"{names or '-'} (inherited)"

    @admin.display(description="written by this route")
    def own_configuration(self, route: Route) -> str:
        return pretty_json(redact(route.context))

    @admin.display(description="effective configuration (defaults, recipe, route)")
    def effective_configuration(self, route: Route) -> str:
        try:
            return pretty_json(self._spec_context(route))
        except ApiError as error:
            return f"not valid: {error.message}"
