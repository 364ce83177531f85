"""Writes of the responses the gateway keeps (``StoredResponse``): one kept after it was
answered, and the retention that deletes them (the tenant's memory age, else
``DEFAULT_MAX_AGE_DAYS``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from contextplatform.gateway.models import StoredResponse

DEFAULT_MAX_AGE_DAYS = 30


def keep_response(
    response_id: str,
    *,
    user: str | None,
    route: str,
    items: list[dict[str, Any]],
    response: dict[str, Any],
    capture_content: bool,
) -> None:
    """Keep an answered response: its conversation and object where the tenant captures content,
    else only that it was answered (``GET`` then says it was not stored)."""
    StoredResponse.objects.create(
        response_id=response_id,
        user_id=user or "",
        route=route[:200],
        content_stored=capture_content,
        items=items if capture_content else [],
        response=response if capture_content else None,
        created_at=timezone.now(),
    )


def purge_responses(max_age_days: int | None) -> int:
    """Delete the responses older than ``max_age_days`` (None: ``DEFAULT_MAX_AGE_DAYS``);
    how many went."""
    days = max_age_days if max_age_days is not None else DEFAULT_MAX_AGE_DAYS
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = StoredResponse.objects.filter(created_at__lt=cutoff).delete()
    return deleted


__all__ = ["DEFAULT_MAX_AGE_DAYS", "keep_response", "purge_responses"]
