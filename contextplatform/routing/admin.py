from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from contextplatform.api.errors import ApiError
from contextplatform.routing.config import validate_route_spec
from contextplatform.routing.models import ReplayRecord, Route
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


@admin.register(ReplayRecord)
class ReplayRecordAdmin(TenantOnlyAdmin):
    list_display = ("id", "route", "user_id", "status", "created_at", "duration_ms")
    list_filter = ("status", "route", "created_at")
    search_fields = ("id", "user_id", "session_key")
    readonly_fields = [field.name for field in ReplayRecord._meta.fields] + [
        "pretty_sources",
        "pretty_items",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="sources (formatted)")
    def pretty_sources(self, record: ReplayRecord) -> str:
        return json.dumps(record.sources, indent=2)

    @admin.display(description="items (formatted)")
    def pretty_items(self, record: ReplayRecord) -> str:
        return json.dumps(record.items, indent=2)
