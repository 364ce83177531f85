"""The route admin's Preview: a real resolve of a sample request, shown to the operator and never
recorded.

It runs the pipeline in its ``preview`` mode (``modes.py``): no replay record, nothing on the live
stream, compression originals in memory only and no compression outcome counted, no session or
memory write; sources run as a dry run (a recalled memory gains no strength). Source and stage metrics are still counted: the preview
really calls the sources, and their latency and failures are real observations of them.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from contextplatform.core.errors import ApiError
from contextplatform.resolve.admin.draft_trial import DraftTrialMixin
from contextplatform.resolve.admin.variants import variants_view
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import preview_resolve
from contextplatform.routes.admin.route_form import JsonTextField
from contextplatform.routes.admin.routes import RouteAdmin
from contextplatform.routes.models import Route


class PreviewForm(forms.Form):
    message = forms.CharField(
        required=False,
        label="User message",
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
    )
    user = forms.CharField(required=False, max_length=200, label="User id")
    session = forms.CharField(required=False, max_length=200, label="Session key")
    body = JsonTextField(
        indent=2,
        label="Raw request body",
        help_text="An OpenAI chat-completions or Anthropic messages body (JSON); used instead "
        "of the user message.",
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
    )
    format = forms.ChoiceField(
        required=False,
        choices=[("", "detect"), ("openai", "openai"), ("anthropic", "anthropic")],
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.errors and cleaned.get("body") is None and not cleaned["message"].strip():
            raise ValidationError("Write a user message or a raw request body.")
        return cleaned

    def request_body(self) -> dict[str, Any]:
        body = self.cleaned_data["body"]
        if body is not None:
            return body
        return {
            "model": "preview",
            "messages": [{"role": "user", "content": self.cleaned_data["message"]}],
        }


def run_preview(request: HttpRequest, route: Route, form: PreviewForm) -> Resolution:
    tenant = request.tenant  # type: ignore[attr-defined]  (set by the tenant middleware)
    cleaned = form.cleaned_data
    return preview_resolve(
        tenant=tenant,
        route=route.name,
        request_body=form.request_body(),
        user=cleaned["user"] or None,
        session=cleaned["session"] or None,
        chat_format=cleaned["format"] or None,
    )


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def preview_report(resolution: Resolution) -> dict[str, Any]:
    """The resolve's report, shaped for the template (tables of sources and items)."""
    report = resolution.report()
    sources = [
        {
            **source,
            "details": as_json(
                {key: source[key] for key in ("notes", "candidates") if key in source}
            )
            if "notes" in source or "candidates" in source
            else "",
        }
        for source in report["sources"]
    ]
    blocked = resolution.blocked
    return {
        "status": resolution.status,
        "refusal": f"source {blocked[0].name!r} failed ({blocked[0].status}) and has "
        "on_failure: block; the API would answer 503 source_failed"
        if blocked
        else "",
        "duration_ms": resolution.duration_ms,
        "sources": sources,
        "items": report["items"],
        "kept": sum(1 for item in report["items"] if item["kept"]),
        "dropped": sum(1 for item in report["items"] if not item["kept"]),
        "budget": report["budget"],
        "tokens": report["tokens"],
        "compression": report["compression"],
        "compression_json": as_json(report["compression"]),
        "request_json": as_json(report["request"]),
    }


@admin.register(Route)
class PreviewingRouteAdmin(DraftTrialMixin, RouteAdmin):
    """The route page with its Preview (a real resolve of a sample request, never recorded), its
    "Try this draft" (``draft_trial``) and its Variants (the arms of its traffic split compared)."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        preview = path(
            "<path:object_id>/preview/",
            self.admin_site.admin_view(self.preview_view),
            name=f"{info[0]}_{info[1]}_preview",
        )
        variants = path(
            "<path:object_id>/variants/",
            self.admin_site.admin_view(self.variants_view),
            name=f"{info[0]}_{info[1]}_variants",
        )
        return [preview, variants, *super().get_urls()]

    def variants_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The route's arms compared over recent replay records and their feedback."""
        return variants_view(self, request, object_id)

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
