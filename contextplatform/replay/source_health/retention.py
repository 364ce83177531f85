"""The minutes' counts and runs kept only as long as the baseline reads them (and a day more)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from django_tenants.utils import get_tenant_model, schema_context

from contextplatform.replay.source_health.models import SourceHealthMinute, SourceHealthStreak

logger = logging.getLogger("contextplatform.replay")


def prune_source_health(days: int | None = None) -> dict[str, int]:
    """Delete the connection's schema's minutes older than ``days`` (``SOURCE_HEALTH_KEEP_DAYS``)
    and the runs of sources not seen since."""
    keep = days if days is not None else getattr(settings, "SOURCE_HEALTH_KEEP_DAYS", 8)
    before = timezone.now() - timedelta(days=keep)
    minutes, _ = SourceHealthMinute.objects.filter(minute__lt=before).delete()
    streaks, _ = SourceHealthStreak.objects.filter(updated_at__lt=before).delete()
    return {"minutes": minutes, "streaks": streaks}


@shared_task(name="replay.prune_source_health")
def prune_source_health_task() -> dict[str, dict[str, int]]:
    """Every tenant's, each in its own schema; one tenant's failure does not stop the others."""
    results: dict[str, dict[str, int]] = {}
    tenants = get_tenant_model().objects.exclude(schema_name="public").order_by("schema_name")
    for schema in tenants.values_list("schema_name", flat=True):
        try:
            with schema_context(schema):
                results[schema] = prune_source_health()
        except Exception:
            logger.exception("source_health_prune_failed", extra={"schema": schema})
    return results
