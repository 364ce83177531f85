from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "contextplatform.routing"
    label = "routing"
    default_auto_field = "django.db.models.BigAutoField"
