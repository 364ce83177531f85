from django.apps import AppConfig


class CompressionConfig(AppConfig):
    name = "compression"
    default_auto_field = "django.db.models.BigAutoField"
