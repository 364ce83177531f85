"""The demo: the stand-in model and the bootstrap of ``make run``, apart from the product's apps."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "contextplatform.demo"
    label = "demo"
    default_auto_field = "django.db.models.BigAutoField"
