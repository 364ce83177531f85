"""Routes kept per process (``routes.selectors.loaded_route``) are dropped in every process when a
route or a layer beneath routes (a recipe, the tenant defaults) is saved or deleted."""

from __future__ import annotations

from contextplatform.core.config_cache import drop_on_change
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from contextplatform.routes.selectors import ROUTES


def connect() -> None:
    drop_on_change(ROUTES, Route, Recipe, TenantDefaults)
