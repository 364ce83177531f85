"""The auditors' pages: replay records, read-only."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from contextplatform.routing.models import ReplayRecord
from tenants.admin import TenantOnlyAdmin


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
