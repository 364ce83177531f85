"""Reads of evaluation sets and runs, and a run as the API and the admin present it."""

from __future__ import annotations

from typing import Any

from contextplatform.core.errors import not_found
from contextplatform.evals import scoring
from contextplatform.evals.models import EvalCase, EvalRun
from contextplatform.resolve.arms import MAIN
from contextplatform.routes.models import Route
from memory.models import Memory


def cases_of(route: Route) -> list[dict[str, Any]]:
    return [case.as_dict() for case in EvalCase.objects.filter(route=route).order_by("position")]


def existing_run(run_id: str) -> EvalRun:
    run = EvalRun.objects.select_related("route").filter(pk=run_id).first()
    if run is None:
        raise not_found(f"evaluation run {run_id!r} does not exist")
    return run


def previous_done(run: EvalRun) -> EvalRun | None:
    """The route's last finished run before ``run``: what ``run`` is compared with."""
    return (
        EvalRun.objects.filter(
            route_id=run.route_id, status=EvalRun.DONE, created_at__lt=run.created_at
        )
        .exclude(pk=run.pk)
        .order_by("-created_at")
        .first()
    )


def latest_run(route: Route) -> EvalRun | None:
    return EvalRun.objects.filter(route=route).order_by("-created_at").first()


def latest_done(route: Route) -> EvalRun | None:
    return EvalRun.objects.filter(route=route, status=EvalRun.DONE).order_by("-created_at").first()


def arm_metrics(route: str, arm: str) -> dict[str, Any] | None:
    """``arm``'s metrics in the route's latest finished run (the variants comparison's evaluation
    columns): its own when the run measured each arm, main's alone when the route had no variants
    then; None before a finished run, or for an arm the run did not measure."""
    run = (
        EvalRun.objects.filter(route__name=route, status=EvalRun.DONE)
        .order_by("-created_at")
        .only("metrics", "arms")
        .first()
    )
    if run is None:
        return None
    if run.arms:
        measured = run.arms.get(arm)
        return measured if isinstance(measured, dict) else None
    if arm != MAIN:
        return None
    return run.metrics or None


def with_memory_text(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Case results with each kept memory's text as it is now (for a key with ``memory.read``);
    a memory erased since shows none."""
    ids = {
        int(item["memory"])
        for case in results
        for item in case.get("kept", [])
        if str(item.get("memory", "")).isdigit()
    }
    texts = {
        str(pk): content
        for pk, content in Memory.objects.filter(pk__in=ids).values_list("pk", "content")
    }
    return [
        {
            **case,
            "kept": [
                {**item, "text": texts[item["memory"]]} if item.get("memory") in texts else item
                for item in case["kept"]
            ],
        }
        if "kept" in case
        else case
        for case in results
    ]


def run_representation(run: EvalRun, *, memory_text: bool) -> dict[str, Any]:
    previous = previous_done(run) if run.status == EvalRun.DONE else None
    warning = scoring.regression(run.metrics, previous.metrics) if previous is not None else None
    shown: dict[str, Any] = {
        "id": run.id,
        "route": run.route.name,
        "route_version": run.route_version,
        "status": run.status,
        "triggered_by": run.triggered_by,
        "metrics": run.metrics or None,
        "cases": with_memory_text(run.results) if memory_text else run.results,
        "previous": None
        if previous is None
        else {"run": previous.id, "route_version": previous.route_version, **previous.metrics},
        "warning": warning,
        "error": run.error or None,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }
    if run.arms:
        # Each arm's metrics (main's are the top-level ones), only for a route with variants.
        shown["arms"] = run.arms
    return shown
