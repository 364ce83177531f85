"""The replay app's periodic tasks (found by Celery's autodiscovery)."""

from contextplatform.replay.source_health.retention import prune_source_health_task

__all__ = ["prune_source_health_task"]
