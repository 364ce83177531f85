"""Routes kept per process (``routing.selectors.loaded_route``) are dropped in every process when a
route or a layer beneath routes (a recipe, the tenant defaults) is saved or deleted."""

from __future__ import annotations

from contextplatform.core.config_cache import drop_on_change
from contextplatform.routing.models import Recipe, Route, TenantDefaults
from contextplatform.routing.selectors import ROUTES


def connect() -> None:
    drop_on_change(ROUTES, Route, Recipe, TenantDefaults)
