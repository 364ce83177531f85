"""Operators' and auditors' admin pages (Django imports this package to register them)."""

from contextplatform.routing.admin import layers, replay, routes  # noqa: F401  (registers the pages)
