"""The route's arms compared: the route's own context ("main") and each variant, over a recent
window of replay records and their feedback (``replay.comparison``), linked from the route page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from contextplatform.core.errors import ApiError
from contextplatform.replay.comparison import (
    DEFAULT_WINDOW_DAYS,
    WINDOWS_DAYS,
    ArmStats,
    compare_arms,
)
from contextplatform.resolve.arms import MAIN
from contextplatform.routes.models import Route

NOT_AVAILABLE = "—"


def route_arms(route: Route) -> tuple[list[tuple[str, float]], str]:
    """The route's arms with their weights, ``main`` first (what the variants leave), and why
    they could not be read (a route stored before a change that no longer validates)."""
    try:
        variants = [(v.name, v.weight) for v in route.spec().variants]
    except ApiError as error:
        return [(MAIN, 1.0)], error.message
    return [(MAIN, max(0.0, 1.0 - sum(w for _, w in variants))), *variants], ""


def window_days(request: HttpRequest) -> int:
    asked = request.GET.get("days", "")
    return int(asked) if asked.isdigit() and int(asked) in WINDOWS_DAYS else DEFAULT_WINDOW_DAYS


def arm_row(stats: ArmStats) -> dict[str, Any]:
    """One arm's line, every missing number shown as a dash."""

    def shown(value: float | None, suffix: str = "") -> str:
        return NOT_AVAILABLE if value is None else f"{value:g}{suffix}"

    evaluation = stats.evaluation or {}
    return {
        "arm": stats.arm,
        "weight": f"{stats.weight:.0%}",
        "requests": stats.requests,
        "mean_tokens": shown(stats.mean_tokens),
        "p50_ms": shown(stats.p50_ms, " ms"),
        "mean_kept": shown(stats.mean_kept),
        "feedback": stats.feedback,
        "up": stats.up,
        "down": stats.down,
        "mean_score": shown(stats.mean_score),
        # The evaluation set's numbers for this arm, when there are any.
        "hit_rate": shown(evaluation.get("hit_rate")),
        "kept_precision": shown(evaluation.get("kept_precision")),
    }


def variants_view(
    model_admin: admin.ModelAdmin[Route], request: HttpRequest, object_id: str
) -> HttpResponse:
    route = model_admin.get_object(request, unquote(object_id))
    if route is None:
        return model_admin._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
            request, model_admin.opts, object_id
        )
    if not model_admin.has_view_or_change_permission(request, route):
        raise PermissionDenied
    arms, problem = route_arms(route)
    days = window_days(request)
    rows = [arm_row(stats) for stats in compare_arms(route.name, arms, days=days)]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Variants of {route.name}",
        "opts": model_admin.opts,
        "original": route,
        "rows": rows,
        "days": days,
        "windows": WINDOWS_DAYS,
        "problem": problem,
        "has_variants": len(arms) > 1,
    }
    return TemplateResponse(request, "admin/routing/route/variants.html", context)
