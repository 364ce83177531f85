"""A draft of a route's ``context``: validated exactly as saving it would validate it, never
saved, and turned into the spec resolve runs (a rerun of recorded requests against the draft)."""

from __future__ import annotations

import copy
from typing import Any

from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.models import Route
from contextplatform.routes.services import prepare_route
from sources.secret_settings import seal


def draft_spec(route: Route, context: Any) -> RouteSpec:
    """``route`` as it would run with ``context`` as its own layer. The checks are a save's (the
    errors name ``context.…``); secrets written as ``{"set": true}`` stand for the route's stored
    ones, as on a save. Nothing is written: the route's model names its deployment, so no inline
    upstream is saved here."""
    prepared = prepare_route(
        {
            "name": route.name,
            "description": route.description,
            "model": route.model,
            "recipe": route.recipe.name if route.recipe_id is not None else None,
            "context": context,
        }
    )
    draft = copy.copy(route)  # the same layers beneath (the recipe, the tenant defaults)
    draft.context = seal(prepared.layer, route.context)
    return draft.spec()
