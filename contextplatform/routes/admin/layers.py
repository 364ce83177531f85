"""Admin pages of the configuration layers beneath routes: recipes and the tenant defaults.

A layer is a partial context configuration edited as JSON. It is checked exactly as the import
checks it (``services.check_document`` on a one-layer document): valid on the layers beneath, and
every route layered on it still valid. The error is shown next to the field it names.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import below, error_text, is_under
from contextplatform.routes import services
from contextplatform.routes.admin.route_form import JsonTextField
from contextplatform.routes.admin.routes import pretty_json
from contextplatform.routes.configuration.schema import (
    ConfigDocument,
    parse_config_document,
    plugins_document,
    recipe_document,
)
from contextplatform.routes.models import Recipe, TenantDefaults
from sources.secret_settings import redact
from tenants.admin import TenantOnlyAdmin

CONTEXT_HELP = (
    "A partial context configuration as JSON (the shape of a route's context: sources, compress, "
    'budget, injection, enabled), e.g. {"budget": {"context_tokens": 2000}}. Blank is {}.'
)


class LayerForm(forms.ModelForm):
    """Checks the layer as the import would; ``document`` and ``context_param`` say how."""

    context = JsonTextField(
        indent=2, help_text=CONTEXT_HELP, widget=forms.Textarea(attrs={"rows": 14, "cols": 80})
    )
    context_param = ""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Secrets of the layer's sources are shown as {"set": true}, which saved keeps them.
        self.initial["context"] = redact(self.initial.get("context"))

    def clean_context(self) -> dict[str, Any]:
        return self.cleaned_data["context"] or {}

    def document(self, context: dict[str, Any]) -> ConfigDocument:
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            services.check_document(self.document(cleaned["context"]))
        except ApiError as error:
            self.show_error(error)
        return cleaned

    def show_error(self, error: ApiError) -> None:
        param, text = error.param or "", error_text(error)
        for field, base in self.error_fields().items():
            if is_under(param, base):
                self.add_error(field, below(param, base, text))
                return
        self.add_error(None, error.message)

    def error_fields(self) -> dict[str, str]:
        return {"context": self.context_param}


class RecipeForm(LayerForm):
    context_param = "recipes[0].plugins[0].configuration"

    class Meta:
        model = Recipe
        fields = ["name", "context"]

    def document(self, context: dict[str, Any]) -> ConfigDocument:
        name = self.cleaned_data.get("name") or self.instance.name
        return parse_config_document({"recipes": [recipe_document(name=name, context=context)]})

    def error_fields(self) -> dict[str, str]:
        return {"name": "recipes[0].name", **super().error_fields()}


class TenantDefaultsForm(LayerForm):
    context_param = "defaults.plugins[0].configuration"

    class Meta:
        model = TenantDefaults
        fields = ["context"]

    def document(self, context: dict[str, Any]) -> ConfigDocument:
        return parse_config_document({"defaults": {"plugins": plugins_document(context)}})


class ShownLayer(TenantOnlyAdmin):
    """Who may only view a layer sees its context with secrets as {"set": true}, not stored."""

    def viewing_only(self, request: HttpRequest, obj: Any) -> bool:
        return obj is not None and not self.has_change_permission(request, obj)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if self.viewing_only(request, obj):
            return ["shown_context" if field == "context" else field for field in fields]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "shown_context") if self.viewing_only(request, obj) else fields

    @admin.display(description="context")
    def shown_context(self, obj: Any) -> str:
        return pretty_json(redact(obj.context))


@admin.register(Recipe)
class RecipeAdmin(ShownLayer):
    form = RecipeForm
    list_display = ("name", "route_count", "updated_at")
    search_fields = ("name",)

    def get_readonly_fields(self, request: HttpRequest, obj: Recipe | None = None) -> Any:
        """Routes and exported documents name their recipe: a recipe keeps its name."""
        return ("name",) if obj is not None else ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Recipe]:
        return super().get_queryset(request).annotate(route_total=Count("routes"))

    @admin.display(description="routes", ordering="route_total")
    def route_count(self, recipe: Recipe) -> int:
        return recipe.route_total  # type: ignore[attr-defined]

    def save_model(self, request: HttpRequest, obj: Recipe, form: Any, change: bool) -> None:
        saved, _ = services.upsert_recipe(name=obj.name, context=form.cleaned_data["context"])
        obj.pk = saved.pk


@admin.register(TenantDefaults)
class TenantDefaultsAdmin(ShownLayer):
    form = TenantDefaultsForm
    list_display = ("__str__", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Only while the tenant has none (the check runs first: the platform host has no table)."""
        if not super().has_add_permission(request):
            return False
        return not TenantDefaults.objects.filter(pk=TenantDefaults.SINGLETON_ID).exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # write {} instead: that is checked against the routes layered on it

    def save_model(
        self, request: HttpRequest, obj: TenantDefaults, form: Any, change: bool
    ) -> None:
        saved = services.save_defaults(context=form.cleaned_data["context"])
        obj.pk = saved.pk
