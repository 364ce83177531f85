"""The gateway's periodic tasks (found by Celery's autodiscovery)."""

from __future__ import annotations

import logging

from celery import shared_task
from django_tenants.utils import get_tenant_model, schema_context

from contextplatform.gateway.response_store import purge_responses

logger = logging.getLogger("contextplatform.gateway")


@shared_task(name="gateway.purge_stored_responses")
def purge_stored_responses_task() -> dict[str, int]:
    """In every tenant, the stored responses past its memory retention (else 30 days) deleted;
    one tenant's failure is logged and does not stop the others."""
    purged: dict[str, int] = {}
    tenants = get_tenant_model().objects.exclude(schema_name="public").order_by("schema_name")
    for tenant in tenants.only("schema_name", "memory_max_age_days"):
        try:
            with schema_context(tenant.schema_name):
                purged[tenant.schema_name] = purge_responses(tenant.memory_max_age_days)
        except Exception:
            logger.exception("response_purge_failed", extra={"schema": tenant.schema_name})
    return purged


__all__ = ["purge_stored_responses_task"]
