"""Evaluation sets: each route's cases, run through the pipeline after every save and on demand;
their per-arm metrics fill the evaluation columns of the route's variants comparison."""

from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "contextplatform.evals"
    label = "evals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from contextplatform.evals import selectors, signals
        from contextplatform.replay import comparison

        signals.connect()
        # The comparison sits below evaluation sets and cannot import them: they plug in here.
        comparison.evaluation_metrics = selectors.arm_metrics
