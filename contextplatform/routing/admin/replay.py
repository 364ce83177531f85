"""The auditors' pages: replay records, read-only for everyone.

Nobody adds, changes or deletes a replay record in the admin, superusers included: the records are
the audit trail of what the platform decided, and a trail its readers can prune proves nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from contextplatform.routing.admin.replay_filters import (
    CreatedFromFilter,
    CreatedToFilter,
    UserIdFilter,
)
from contextplatform.routing.admin.replay_presentation import replay_sections
from contextplatform.routing.models import ReplayRecord
from contextplatform.routing.pipeline.replay_writer import flush_current_tenant
from tenants.admin import TenantOnlyAdmin


@admin.register(ReplayRecord)
class ReplayRecordAdmin(TenantOnlyAdmin):
    change_form_template = "admin/routing/replayrecord/change_form.html"
    list_display = (
        "id",
        "created_at",
        "route",
        "user_id",
        "status",
        "source_outcomes",
        "kept_items",
        "token_counts",
        "duration_ms",
    )
    list_filter = ("status", "route", UserIdFilter, CreatedFromFilter, CreatedToFilter)
    date_hierarchy = "created_at"
    search_fields = ("id", "route", "user_id", "session_key")
    list_per_page = 50
    show_full_result_count = False  # an exact count over a large trail costs a full scan
    fields = ("id", "route", "status", "created_at")  # the page itself draws the tables

    def get_queryset(self, request: HttpRequest) -> QuerySet[ReplayRecord]:
        flush_current_tenant()  # the records this process has accepted but not yet written
        return super().get_queryset(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ReplayRecord | None = None,
    ) -> TemplateResponse:
        if obj is not None:
            context["replay"] = replay_sections(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="sources")
    def source_outcomes(self, record: ReplayRecord) -> str:
        failed = [s.get("name", "?") for s in record.sources if s.get("status") != "ok"]
        outcome = f"{len(record.sources)}"
        return f"{outcome}, failed: {', '.join(failed)}" if failed else f"{outcome}, all ok"

    @admin.display(description="kept / items")
    def kept_items(self, record: ReplayRecord) -> str:
        return f"{sum(1 for item in record.items if item.get('kept'))} / {len(record.items)}"

    @admin.display(description="tokens before → after")
    def token_counts(self, record: ReplayRecord) -> str:
        return f"{record.tokens.get('before', '?')} → {record.tokens.get('after', '?')}"
