"""Evaluation sets: each route's cases, run through the pipeline after every save and on demand."""

from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "contextplatform.evals"
    label = "evals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from contextplatform.evals import signals

        signals.connect()
