"""The operators' pages: routes, recipes, tenant defaults (Django imports this package to
register them)."""

from contextplatform.routes.admin import layers, routes  # noqa: F401  (registers the pages)
