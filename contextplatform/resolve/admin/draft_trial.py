"""The route page's "Try this draft": the change form as it stands (not saved) run against the
route's latest captured requests (``reruns.try_draft``), and what it would change, added up:
tokens saved, items changed, the sources that would fail, the judge's cost.

The form is validated as saving it would be; nothing is written. The reruns run one after the
other in the request (at most ``MAX_TRIAL`` records): an operator's check before saving, not a
batch job. Whoever may change the route may try a draft of it."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from contextplatform.core.errors import ApiError
from contextplatform.replay.admin.presentation import judge_usage_text
from contextplatform.resolve.reruns import DEFAULT_TRIAL, MAX_TRIAL, Trial, try_draft
from contextplatform.routes.admin.routes import RouteAdmin
from contextplatform.routes.drafts import draft_spec
from contextplatform.routes.models import Route

LAST_FIELD = "try_draft_last"


def trial_size(raw: Any) -> int | str:
    """How many records to run (the form's number), or what is wrong with it."""
    try:
        value = int(raw or DEFAULT_TRIAL)
    except (TypeError, ValueError):
        return "The number of requests must be a whole number."
    if not 1 <= value <= MAX_TRIAL:
        return f"The number of requests must be between 1 and {MAX_TRIAL}."
    return value


class DraftTrialMixin(RouteAdmin):
    """Adds ``<route>/try-draft/`` (POST, the change form's fields) to the route's admin."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        trial = path(
            "<path:object_id>/try-draft/",
            self.admin_site.admin_view(self.try_draft_view),
            name=f"{info[0]}_{info[1]}_try_draft",
        )
        return [trial, *super().get_urls()]

    def try_draft_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        route = self.get_object(request, unquote(object_id))
        if route is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_change_permission(request, route):
            raise PermissionDenied
        if request.method != "POST":  # the draft comes from the route page's form
            return self.trial_page(request, route, [], None, None)
        errors: list[str] = []
        trial: Trial | None = None
        size = trial_size(request.POST.get(LAST_FIELD))
        if isinstance(size, str):
            errors.append(size)
        # The form binds to a copy: its validation writes the draft's fields onto its instance.
        form = self.get_form(request, route, change=True)(
            request.POST, request.FILES, instance=self.get_object(request, unquote(object_id))
        )
        if not form.is_valid():
            errors += form_errors(form)
        if not errors:
            assert isinstance(size, int) and form.prepared is not None
            try:
                spec = draft_spec(route, form.prepared.layer)
                trial = try_draft(
                    tenant=request.tenant,  # type: ignore[attr-defined]
                    route=route.name,
                    spec=spec,
                    limit=size,
                )
            except ApiError as error:
                errors.append(error.message)
        return self.trial_page(
            request, route, errors, trial, size if isinstance(size, int) else None
        )

    def trial_page(
        self,
        request: HttpRequest,
        route: Route,
        errors: list[str],
        trial: Trial | None,
        asked: int | None,
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": f"Draft of {route.name} tried on its latest requests",
            "opts": self.opts,
            "original": route,
            "errors": errors,
            "trial": trial,
            "tried": request.method == "POST",
            "asked": asked,
            "failing": sorted(trial.failing.items()) if trial else [],
            "judge_cost": judge_usage_text(trial.judge_usage) if trial else "",
            "max_trial": MAX_TRIAL,
        }
        return TemplateResponse(request, "admin/routing/route/try_draft.html", context)


def form_errors(form: Any) -> list[str]:
    """The change form's errors as lines: its own fields' and each source row's."""
    lines = [
        " ".join(messages) if name == "__all__" else f"{name}: {' '.join(messages)}"
        for name, messages in form.errors.items()
    ]
    for index, row in enumerate(form.sources.errors, start=1):
        lines += [f"source {index}, {name}: {' '.join(messages)}" for name, messages in row.items()]
    return lines
