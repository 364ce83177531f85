"""The operators' pages of a tenant's admin: routes (with their sources inline and a Preview),
recipes and the tenant defaults. The auditors' replay pages live in ``admin.replay``."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from contextplatform.core.errors import ApiError
from contextplatform.routing import selectors, services
from contextplatform.routing.admin.preview import PreviewForm, preview_report, run_preview
from contextplatform.routing.admin.route_form import (
    TARGET_KEYS,
    TARGET_KINDS,
    RouteForm,
    target_field,
)
from contextplatform.routing.models import Route
from sources.secret_settings import redact
from tenants.admin import TenantOnlyAdmin

ROUTE_FIELDSETS: tuple[tuple[str | None, dict[str, Any]], ...] = (
    (None, {"fields": ("name", "description", "recipe")}),
    ("Model", {"fields": ("model_name", "context_window", "max_output_tokens", "upstream")}),
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


@admin.register(Route)
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
            )
        else:
            saved = services.create_route(
                spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe
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

    # --- Preview -----------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        preview = path(
            "<path:object_id>/preview/",
            self.admin_site.admin_view(self.preview_view),
            name=f"{info[0]}_{info[1]}_preview",
        )
        return [preview, *super().get_urls()]

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Resolve a sample request on the saved route and show the report; nothing is recorded.

        It runs the route's real sources (outbound calls, judges): those who may change the route."""
        route = self.get_object(request, unquote(object_id))
        if route is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_change_permission(request, route):
            raise PermissionDenied
        form = PreviewForm(request.POST if request.method == "POST" else None)
        report = None
        if form.is_valid():
            try:
                report = preview_report(run_preview(request, route, form))
            except ApiError as error:
                form.add_error(None, error.message)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Preview of {route.name}",
            "opts": self.opts,
            "original": route,
            "form": form,
            "report": report,
        }
        return TemplateResponse(request, "admin/routing/route/preview.html", context)
