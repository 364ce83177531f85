"""The route page with its Preview (Django imports this package to register it)."""

from contextplatform.resolve.admin import preview  # noqa: F401  (registers the page)
