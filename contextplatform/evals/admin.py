"""The route page with its Evaluation: the route's cases (edited as JSON), its latest run beside
the previous one, each case's hit or miss, and a warning on the route page itself when the last
run made it worse. It extends the route page with its Preview (``resolve.admin.preview``)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from contextplatform.core.errors import ApiError
from contextplatform.evals import selectors, services
from contextplatform.evals.cases import parse_cases
from contextplatform.resolve.admin.preview import PreviewingRouteAdmin
from contextplatform.routes.models import Route

METRICS = ("cases", "hit_rate", "kept_precision", "ndcg", "tokens_mean", "latency_p50_ms")


class CasesForm(forms.Form):
    cases = forms.CharField(
        label="Cases (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 16, "cols": 100, "spellcheck": "false"}),
        help_text='A list of {"id", "query", "user", "session", "expect": {"documents": [...], '
        '"memories_containing": [...], "text_containing": [...]}}; at most 500.',
    )

    def parsed(self) -> list[Any]:
        text = self.cleaned_data["cases"].strip() or "[]"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ApiError("invalid_request", f"not JSON: {error}") from None
        return parse_cases({"cases": data})


def metric_rows(current: dict[str, Any], previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "current": current.get(name),
            "previous": None if previous is None else previous.get(name),
        }
        for name in METRICS
    ]


def evaluation_summary(route: Route, *, memory_text: bool) -> dict[str, Any] | None:
    """The latest run as the templates show it (None before the first run)."""
    run = selectors.latest_run(route)
    if run is None:
        return None
    shown = selectors.run_representation(run, memory_text=memory_text)
    return {**shown, "rows": metric_rows(run.metrics or {}, shown["previous"])}


admin.site.unregister(Route)


@admin.register(Route)
class EvaluatingRouteAdmin(PreviewingRouteAdmin):
    """The route page with its Preview and its Evaluation."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        evaluation = path(
            "<path:object_id>/evaluation/",
            self.admin_site.admin_view(self.evaluation_view),
            name=f"{info[0]}_{info[1]}_evaluation",
        )
        return [evaluation, *super().get_urls()]

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        route = context.get("original")
        if route is not None:
            context["evaluation"] = evaluation_summary(route, memory_text=False)
        return super().render_change_form(request, context, *args, **kwargs)

    def evaluation_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Anyone who may see the route sees its evaluation; those who may change it edit the
        cases and run them."""
        route = self.get_object(request, unquote(object_id))
        if route is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, route):
            raise PermissionDenied
        may_change = self.has_change_permission(request, route)
        here = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_evaluation", args=[route.pk]
        )
        form = CasesForm(
            request.POST if request.method == "POST" else None,
            initial={"cases": json.dumps(selectors.cases_of(route), indent=2, ensure_ascii=False)},
        )
        if request.method == "POST":
            if not may_change:
                raise PermissionDenied
            if "run" in request.POST:
                try:
                    run = services.start_run(route=route)
                except ApiError as error:
                    messages.error(request, error.message)
                else:
                    messages.success(request, f"Evaluation run {run.id} started.")
                return HttpResponseRedirect(here)
            if form.is_valid():
                try:
                    cases = form.parsed()
                except ApiError as error:
                    form.add_error("cases", error.message)
                else:
                    services.replace_cases(route=route, cases=cases)
                    messages.success(request, f"{len(cases)} evaluation case(s) saved.")
                    return HttpResponseRedirect(here)
        memory_text = request.user.has_perm("memory.view_memory")
        context = {
            **self.admin_site.each_context(request),
            "title": f"Evaluation of {route.name}",
            "opts": self.opts,
            "original": route,
            "form": form,
            "may_change": may_change,
            "evaluation": evaluation_summary(route, memory_text=memory_text),
        }
        return TemplateResponse(request, "admin/routing/route/evaluation.html", context)
