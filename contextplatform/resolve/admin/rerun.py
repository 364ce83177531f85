"""The replay record page with its Re-run: the record's request resolved again against the route
as it is now (``reruns.rerun_and_diff``: history and memories as they stood then, nothing written,
no answer asked of the model), shown beside what the record kept, with the diff.

A rerun calls the route's sources and judges for real; whoever may read the record may run it
(the API asks ``replay.read`` for the same)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from contextplatform.core.errors import ApiError
from contextplatform.replay.admin.presentation import judge_usage_text
from contextplatform.replay.admin.records import ReplayRecordAdmin, is_plain_id
from contextplatform.replay.models import ReplayRecord
from contextplatform.resolve.reruns import rerun_and_diff


@admin.register(ReplayRecord)
class RerunningReplayRecordAdmin(ReplayRecordAdmin):
    change_form_template = "admin/routing/replayrecord/rerun_change_form.html"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        rerun = path(
            "<path:object_id>/rerun/",
            self.admin_site.admin_view(self.rerun_view),
            name=f"{info[0]}_{info[1]}_rerun",
        )
        return [rerun, *super().get_urls()]

    def rerun_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        record_id = object_id if is_plain_id(object_id) else unquote(object_id)
        record = self.get_object(request, record_id)
        if record is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, record):
            raise PermissionDenied
        result: dict[str, Any] | None = None
        error = ""
        try:
            result = rerun_and_diff(tenant=request.tenant, record=record)  # type: ignore[attr-defined]
        except ApiError as failed:
            error = failed.message
        context = {
            **self.admin_site.each_context(request),
            "title": f"Re-run of {record.id}",
            "opts": self.opts,
            "original": record,
            "result": result,
            "error": error,
            "sides": side_by_side(result) if result else [],
            "judge_cost": judge_usage_text(result["rerun"]["judge_usage"]) if result else "",
            "judge_cost_then": judge_usage_text(result["recorded"]["judge_usage"])
            if result
            else "",
        }
        return TemplateResponse(request, "admin/routing/replayrecord/rerun.html", context)


def side_by_side(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each source once, with what each side made of it (its status, counts, judge's cost)."""
    recorded = {s["name"]: s for s in result["recorded"]["sources"]}
    rerun = {s["name"]: s for s in result["rerun"]["sources"]}
    names = [*recorded, *(name for name in rerun if name not in recorded)]
    return [
        {
            "name": name,
            "recorded": recorded.get(name),
            "rerun": rerun.get(name),
            "changed": (recorded.get(name) or {}).get("status")
            != (rerun.get(name) or {}).get("status")
            or (recorded.get(name) or {}).get("kept") != (rerun.get(name) or {}).get("kept"),
        }
        for name in names
    ]
