"""The resolve pipeline, its modes and its use cases, and the APIs that run it."""

from django.apps import AppConfig


class ResolveConfig(AppConfig):
    name = "contextplatform.resolve"
    label = "resolve"
    default_auto_field = "django.db.models.BigAutoField"
