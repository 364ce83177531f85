"""Periodic upkeep of memories: each tenant's retention (expiry, maximum age, maximum per user),
and the writes of handed-back turns whose send was lost sent again."""

from __future__ import annotations

import logging

from celery import shared_task
from django_tenants.utils import get_tenant_model, schema_context

from memory.services import apply_retention
from memory.writing import resend_stranded_turns

logger = logging.getLogger("contextplatform.memory")


@shared_task(name="memory.apply_retention")
def apply_retention_task() -> dict[str, dict[str, int]]:
    """Apply every tenant's memory retention in its own schema; one tenant's failure is logged
    and does not stop the others."""
    results: dict[str, dict[str, int]] = {}
    tenants = get_tenant_model().objects.exclude(schema_name="public").order_by("schema_name")
    for tenant in tenants.only("schema_name", "memory_max_age_days", "memory_max_per_user"):
        try:
            with schema_context(tenant.schema_name):
                results[tenant.schema_name] = apply_retention(
                    max_age_days=tenant.memory_max_age_days,
                    max_per_user=tenant.memory_max_per_user,
                )
        except Exception:
            logger.exception("memory_retention_failed", extra={"schema": tenant.schema_name})
    return results


@shared_task(name="memory.resend_stranded_turns")
def resend_stranded_turns_task() -> dict[str, int]:
    """In every tenant, the turns handed back while the broker could not be reached, sent again."""
    resent: dict[str, int] = {}
    tenants = get_tenant_model().objects.exclude(schema_name="public").order_by("schema_name")
    for tenant in tenants.only("schema_name"):
        try:
            with schema_context(tenant.schema_name):
                count = resend_stranded_turns()
        except Exception:
            logger.exception("memory_resend_failed", extra={"schema": tenant.schema_name})
            continue
        if count:
            resent[tenant.schema_name] = count
    return resent
