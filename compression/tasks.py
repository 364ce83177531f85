"""Periodic upkeep of compression state."""

from __future__ import annotations

from celery import shared_task
from django_tenants.utils import get_tenant_model, schema_context

from compression.recovery import purge_expired


@shared_task(name="compression.purge_expired_recovery")
def purge_expired_recovery() -> dict[str, int]:
    """Delete expired recovery originals in every tenant's schema."""
    purged: dict[str, int] = {}
    for schema in (
        get_tenant_model()
        .objects.exclude(schema_name="public")
        .values_list("schema_name", flat=True)
    ):
        with schema_context(schema):
            purged[schema] = purge_expired()
    return purged
