"""The per-key request rate limit (``API_RATE_LIMIT_PER_MINUTE``; 0, the default, is off): the
gateway and ``POST /api/v1/resolve`` both ask ``refusal`` and answer 429 with ``Retry-After`` in
their own error shapes.

A fixed window of a minute per API key, opened by the key's first request in it, counted in
Django's cache: Redis with ``REDIS_URL`` (shared by every worker; ``INCR`` is atomic), else this
process's memory (each worker counts its own). The cache failing lets requests through: the limit
protects the service, and an unreachable Redis should not take the API down with it."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger("contextplatform.api")

WINDOW_S = 60
KEY_PREFIX = "api-rate"


@dataclass(frozen=True)
class RateLimited:
    """A request over its key's limit: how many a minute the key may make and when it may again."""

    limit: int
    retry_after_s: int

    @property
    def message(self) -> str:
        return (
            f"rate limit exceeded: this API key may make {self.limit} requests a minute; "
            f"retry after {self.retry_after_s} s"
        )

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


def limit_per_minute() -> int:
    return max(int(getattr(settings, "API_RATE_LIMIT_PER_MINUTE", 0) or 0), 0)


def enabled() -> bool:
    return limit_per_minute() > 0


def _keys(key_id: object) -> tuple[str, str]:
    return f"{KEY_PREFIX}:{key_id}:count", f"{KEY_PREFIX}:{key_id}:opened"


def _open_window(count_key: str, opened_key: str) -> int:
    # ``add`` only writes a missing key: of two requests opening a window at once, one opens it
    # and the other counts in it.
    if cache.add(count_key, 1, timeout=WINDOW_S):
        cache.set(opened_key, time.time(), timeout=WINDOW_S)
        return 1
    return int(cache.incr(count_key))


def _count(key_id: object) -> int:
    count_key, opened_key = _keys(key_id)
    try:
        return _open_window(count_key, opened_key)
    except ValueError:  # the window closed between add and incr
        return _open_window(count_key, opened_key)


def _retry_after_s(key_id: object) -> int:
    opened = cache.get(_keys(key_id)[1])
    if not isinstance(opened, float):
        return 1
    return max(1, math.ceil(opened + WINDOW_S - time.time()))


def refusal(key_id: object) -> RateLimited | None:
    """Count one request of the key ``key_id``; a ``RateLimited`` when it is over the limit."""
    limit = limit_per_minute()
    if limit <= 0:
        return None
    try:
        if _count(key_id) <= limit:
            return None
        return RateLimited(limit=limit, retry_after_s=_retry_after_s(key_id))
    except Exception:
        logger.warning("the rate limit's cache failed; request let through", exc_info=True)
        return None


__all__ = ["RateLimited", "enabled", "limit_per_minute", "refusal"]
