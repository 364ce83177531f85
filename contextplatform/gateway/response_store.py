"""Writes of the responses the gateway keeps (``StoredResponse``): one kept after it was
answered, one deleted by its own caller (``DELETE /v1/responses/{id}``), and the retention that
deletes them (the tenant's memory age, else ``DEFAULT_MAX_AGE_DAYS``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from contextplatform.gateway.models import StoredResponse
from contextplatform.gateway.response_lookup import unknown

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


def delete_response(response_id: str, user: str | None) -> dict[str, Any]:
    """Delete the caller's own kept response (kept with content or without: either is theirs to
    delete), answered as OpenAI answers a deletion. Another user's or tenant's is 404 like an
    unknown one, so a deletion tells no more than a read does."""
    deleted, _ = StoredResponse.objects.filter(response_id=response_id, user_id=user or "").delete()
    if not deleted:
        raise unknown(response_id, None)
    return {"id": response_id, "object": "response", "deleted": True}


def purge_responses(max_age_days: int | None) -> int:
    """Delete the responses older than ``max_age_days`` (None: ``DEFAULT_MAX_AGE_DAYS``);
    how many went."""
    days = max_age_days if max_age_days is not None else DEFAULT_MAX_AGE_DAYS
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = StoredResponse.objects.filter(created_at__lt=cutoff).delete()
    return deleted


__all__ = ["DEFAULT_MAX_AGE_DAYS", "delete_response", "keep_response", "purge_responses"]
