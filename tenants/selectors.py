"""Reads for tenants and keys."""

from __future__ import annotations

from tenants.models import ApiKey
from tenants.services import hash_key


def active_api_key(plain_key: str) -> ApiKey | None:
    if not plain_key:
        return None
    return (
        ApiKey.objects.select_related("tenant")
        .filter(key_hash=hash_key(plain_key), revoked_at__isnull=True)
        .first()
    )
