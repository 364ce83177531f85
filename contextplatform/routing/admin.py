from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from contextplatform.api.errors import ApiError
from contextplatform.routing import replay_admin  # noqa: F401  (registers the replay pages)
from contextplatform.routing.config import validate_route_spec
from contextplatform.routing.models import Route
from tenants.admin import TenantOnlyAdmin


class RouteForm(forms.ModelForm):
    class Meta:
        model = Route
        fields = ["name", "description", "model", "context"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        data = {key: cleaned.get(key) for key in ("name", "description", "model", "context")}
        data = {key: value for key, value in data.items() if value is not None}
        try:
            spec = validate_route_spec(data)
        except ApiError as error:
            field = (error.param or "").split(".")[0]
            self.add_error(field if field in self.fields else None, error.message)
            return cleaned
        dumped = spec.model_dump(mode="json")
        cleaned["model"], cleaned["context"] = dumped["model"], dumped["context"]
        self.instance.context_window = spec.model.context_window
        self.instance.max_output_tokens = spec.model.max_output_tokens
        return cleaned


@admin.register(Route)
class RouteAdmin(TenantOnlyAdmin):
    form = RouteForm
    list_display = ("name", "context_window", "max_output_tokens", "source_names", "updated_at")
    search_fields = ("name", "description")

    @admin.display(description="sources")
    def source_names(self, route: Route) -> str:
        return ", ".join(
            s.get("name") or s.get("type", "?") for s in route.context.get("sources", [])
        )
