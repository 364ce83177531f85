"""The auditors' pages: replay records, read-only for everyone. The page is registered with its
Re-run by ``resolve.admin.rerun`` (a rerun runs the pipeline, which sits above replay).

Nobody adds, changes or deletes a replay record in the admin, superusers included: the records are
the audit trail of what the platform decided, and a trail its readers can prune proves nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from contextplatform.replay.admin.presentation import (
    replay_sections,
    source_outcome_summary,
)
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import flush_current_tenant
from tenants.admin import TenantOnlyAdmin
from tenants.admin_filters import (
    CreatedFromFilter,
    CreatedToFilter,
    UserIdFilter,
)


def is_plain_id(object_id: str) -> bool:
    """A replay id as the API and the logs show it (``rsv_`` and lowercase hex): the admin's own
    quoting writes its underscore as ``_5F``, which is not an id an auditor can read or paste."""
    return object_id.startswith("rsv_") and "_5F" not in object_id


class PlainIdChangeList(ChangeList):
    """Links each record with its id as it is (``…/replayrecord/rsv_6b0e…/change/``)."""

    def url_for_result(self, result: Model) -> str:
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=(result.pk,),
            current_app=self.model_admin.admin_site.name,
        )


class ReplayRecordAdmin(TenantOnlyAdmin):
    change_form_template = "admin/routing/replayrecord/change_form.html"
    list_display = (
        "id",
        "created",
        "route",
        "user_id",
        "session",
        "status",
        "source_outcomes",
        "kept_items",
        "token_counts",
        "timing",
    )
    list_filter = ("status", "route", "variant", UserIdFilter, CreatedFromFilter, CreatedToFilter)
    date_hierarchy = "created_at"
    search_fields = ("id", "route", "user_id", "session_key")
    list_per_page = 50
    show_full_result_count = False  # an exact count over a large trail costs a full scan
    fields = ("id", "route", "status", "created_at")  # the page itself draws the tables

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return PlainIdChangeList

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # A plain id is quoted here as the admin expects it (its unquoting reads ``_6b`` as "k").
        if is_plain_id(object_id):
            object_id = quote(object_id)
        return super().change_view(request, object_id, form_url, extra_context)

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

    class Media:
        # Keeps the short count columns on one line beside the filter sidebar.
        css = {"all": ("routing/replay_admin.css",)}

    @admin.display(description="sources")
    def source_outcomes(self, record: ReplayRecord) -> str:
        return source_outcome_summary(record.sources or [])

    @admin.display(description="kept")
    def kept_items(self, record: ReplayRecord) -> str:
        return f"{sum(1 for item in record.items if item.get('kept'))} / {len(record.items)}"

    @admin.display(description="session", ordering="session_key")
    def session(self, record: ReplayRecord) -> str:
        key = record.session_key
        return format_html('<span class="replay-id" title="{}">{}</span>', key, key) if key else "-"

    @admin.display(description="time", ordering="created_at")
    def created(self, record: ReplayRecord) -> str:
        # In the tenant's time zone, on one line; the year and the seconds on hover.
        moment = timezone.localtime(record.created_at)
        return format_html(
            '<span title="{}">{}</span>',
            moment.isoformat(timespec="seconds"),
            moment.strftime("%m-%d %H:%M"),
        )

    @admin.display(description="ms", ordering="duration_ms")
    def timing(self, record: ReplayRecord) -> str:
        # The resolve's time, then the whole call the gateway carried (the deployment's answer
        # included); a REST resolve's client called its model itself: no call time.
        resolve = f"{record.duration_ms:.0f}"
        return resolve if record.call_ms is None else f"{resolve} / {record.call_ms:.0f}"

    @admin.display(description="tokens")
    def token_counts(self, record: ReplayRecord) -> str:
        return f"{record.tokens.get('before', '?')} → {record.tokens.get('after', '?')}"
