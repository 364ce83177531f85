"""A saved route as a configuration document, ready to import elsewhere."""

from __future__ import annotations

from typing import Any

from contextplatform.routes.configuration.schema import recipe_document, route_document
from contextplatform.routes.models import Route
from sources.secret_settings import redact


def export_document(route: Route) -> dict[str, Any]:
    """The route as a configuration document (``routes``, and ``recipes`` when it has one, so the
    document imports on its own). Secrets are shown as ``{"set": true}``: imported back into the
    same tenant, they keep what is stored."""
    document: dict[str, Any] = {
        "routes": [
            route_document(
                name=route.name,
                description=route.description,
                model=route.model,
                recipe=route.recipe.name if route.recipe_id is not None else None,
                context=redact(route.context),
                variants=[
                    {
                        "name": variant["name"],
                        "weight": variant["weight"],
                        "context": redact(variant.get("context") or {}),
                    }
                    for variant in route.variants or []
                ],
            )
        ]
    }
    if route.recipe_id is not None:
        document["recipes"] = [
            recipe_document(name=route.recipe.name, context=redact(route.recipe.context))
        ]
    return document
