"""Routes kept per process (``routing.selectors.loaded_route``) are dropped in every process when a
route or a layer beneath routes (a recipe, the tenant defaults) is saved or deleted."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save

from contextplatform.core.config_cache import changed
from contextplatform.routing.models import Recipe, Route, TenantDefaults
from contextplatform.routing.selectors import ROUTES


def routes_changed(sender: type, using: str = "default", **kwargs: Any) -> None:
    changed(ROUTES, using)


def connect() -> None:
    for signal in (post_save, post_delete):
        for model in (Route, Recipe, TenantDefaults):
            signal.connect(routes_changed, sender=model, dispatch_uid=f"routes-{model.__name__}")
