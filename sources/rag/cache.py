"""Cached retrievals: keyed by tenant, route, source, match block, filter and query (and user for
user-scoped sources), plus the backend's change token, so a document change invalidates at once."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache

from contextplatform.core import safe_json


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
    payload = safe_json.dumps(  # a route's stored filter may hold what orjson refuses
        {
            "schema": schema,
            "route": route,
            "source": source,
            "parts": parts,
            "query": query,
            "user": user,
            "token": token,
        },
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        default=str,
    )
    return "rag:" + hashlib.sha256(payload).hexdigest()


def _backend() -> tuple[BaseCache, bool]:
    """The cache, and whether it is this process's memory: read and written in place then (no
    I/O), instead of on a trip to the request's thread that a network cache needs."""
    backend = caches["default"]
    return backend, isinstance(backend, LocMemCache)


# With a network cache (Redis), this process keeps what it read or wrote for a few seconds too, so
# a popular retrieval is not a round trip (and a trip to the request's thread) at every resolve. A
# key names the backend's change token, so a copy held here is never of changed documents; it may
# outlive its entry's TTL in the shared cache by FRONT_TTL_S at most.
FRONT_TTL_S = 5
FRONT = LocMemCache("rag-front", {"TIMEOUT": FRONT_TTL_S, "OPTIONS": {"MAX_ENTRIES": 2000}})


def get_on_thread(key: str) -> list[dict[str, Any]] | None:
    """The cached entry, for a caller on the request's thread (a network cache is read there)."""
    backend, in_memory = _backend()
    found: list[dict[str, Any]] | None = backend.get(key) if in_memory else FRONT.get(key)
    if found is None and not in_memory:
        found = backend.get(key)
        if found is not None:
            FRONT.set(key, found, FRONT_TTL_S)
    return found


async def get(key: str) -> list[dict[str, Any]] | None:
    _, in_memory = _backend()
    if in_memory:
        return get_on_thread(key)  # this process's memory: no I/O, no trip
    found: list[dict[str, Any]] | None = FRONT.get(key)
    if found is None:
        # the network cache's own aget is this same trip to the request's thread
        found = await sync_to_async(get_on_thread)(key)
    return found


async def put(key: str, value: list[dict[str, Any]], ttl_seconds: int) -> None:
    backend, in_memory = _backend()
    if in_memory:
        backend.set(key, value, ttl_seconds)
    else:
        await backend.aset(key, value, ttl_seconds)
        FRONT.set(key, value, min(ttl_seconds, FRONT_TTL_S))
