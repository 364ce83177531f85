"""Cached retrievals: keyed by tenant, route, source, match block, filter and query (and user for
user-scoped sources), plus the backend's change token, so a document change invalidates at once."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.core.cache import cache


def cache_key(
    *,
    schema: str,
    route: str,
    source: str,
    parts: dict[str, Any],
    query: str,
    user: str | None,
    token: str,
) -> str:
    payload = json.dumps(
        {
            "schema": schema,
            "route": route,
            "source": source,
            "parts": parts,
            "query": query,
            "user": user,
            "token": token,
        },
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return "rag:" + hashlib.sha256(payload.encode()).hexdigest()


async def get(key: str) -> list[dict[str, Any]] | None:
    return await cache.aget(key)


async def put(key: str, value: list[dict[str, Any]], ttl_seconds: int) -> None:
    await cache.aset(key, value, ttl_seconds)
