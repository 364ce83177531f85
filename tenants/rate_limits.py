"""The per-key request rate limit (``API_RATE_LIMIT_PER_MINUTE``; 0, the default, is off): the
gateway and ``POST /api/v1/resolve`` both ask ``refusal`` and answer 429 with ``Retry-After`` in
their own error shapes.

A fixed window of a minute per API key, opened by the key's first request in it, counted in
Django's cache: Redis with ``REDIS_URL`` (shared by every worker; ``INCR`` is atomic), else this
process's memory (each worker counts its own), by the one per-minute counter
(``contextplatform/core/minute_counts.py``). The cache failing lets requests through: the limit
protects the service, and an unreachable Redis should not take the API down with it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings

from contextplatform.core import minute_counts

logger = logging.getLogger("contextplatform.api")

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


def _window(key_id: object) -> str:
    return f"{KEY_PREFIX}:{key_id}"


def refusal(key_id: object) -> RateLimited | None:
    """Count one request of the key ``key_id``; a ``RateLimited`` when it is over the limit."""
    limit = limit_per_minute()
    if limit <= 0:
        return None
    try:
        window = _window(key_id)
        if minute_counts.window_count(window) <= limit:
            return None
        return RateLimited(limit=limit, retry_after_s=minute_counts.window_retry_after_s(window))
    except Exception:
        logger.warning("the rate limit's cache failed; request let through", exc_info=True)
        return None


__all__ = ["RateLimited", "enabled", "limit_per_minute", "refusal"]
