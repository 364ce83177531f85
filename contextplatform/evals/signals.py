"""A save of a route, a recipe or the tenant defaults runs the evaluation cases of the routes it
changes (``services.run_changed``, once the save is committed)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models.signals import post_save

from contextplatform.evals.models import EvalCase
from contextplatform.evals.services import run_after_commit
from contextplatform.routes.models import Recipe, Route, TenantDefaults


def routes_with_cases(**filters: Any) -> list[int]:
    return list(
        EvalCase.objects.filter(**{f"route__{k}": v for k, v in filters.items()})
        .values_list("route_id", flat=True)
        .distinct()
    )


def route_saved(sender: type[Route], instance: Route, raw: bool = False, **_: Any) -> None:
    if not raw and (ids := routes_with_cases(pk=instance.pk)):
        run_after_commit(connection.schema_name, ids)


def recipe_saved(sender: type[Recipe], instance: Recipe, raw: bool = False, **_: Any) -> None:
    if not raw and (ids := routes_with_cases(recipe=instance.pk)):
        run_after_commit(connection.schema_name, ids)


def defaults_saved(sender: type[TenantDefaults], raw: bool = False, **_: Any) -> None:
    if not raw and (ids := routes_with_cases()):
        run_after_commit(connection.schema_name, ids)


def connect() -> None:
    post_save.connect(route_saved, sender=Route, dispatch_uid="evals_route_saved")
    post_save.connect(recipe_saved, sender=Recipe, dispatch_uid="evals_recipe_saved")
    post_save.connect(defaults_saved, sender=TenantDefaults, dispatch_uid="evals_defaults_saved")
