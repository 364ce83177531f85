"""A deployment's ``limits`` (requests and tokens a minute) on the gateway's calls: before a call
is sent to a deployment with limits, its minute's counts are read; at either limit the deployment
is skipped for the call (``fallback.first_answer`` tries the next one, and answers 429
``rate_limited`` when every deployment of the call was skipped).

A fixed window per clock minute, per tenant schema and deployment, counted in Django's cache:
Redis with ``REDIS_URL`` (shared by every worker; ``INCR`` is atomic), else this process's memory.
``rpm`` counts each request sent. ``tpm`` counts the tokens the provider reported (input and
output) once the answer is in (``spend``): the reported usage is what the provider's own limit
counts, and it is the only number known for the output; a call is let through while its minute's
reported tokens are under the limit, so the calls in flight when it is reached may pass it by
their own size. A deployment without limits costs nothing here (no cache trip). The cache failing
lets calls through, as the per-key limit does (tenants/rate_limits.py)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.cache import cache

from contextplatform.deployments.selectors import Upstream

logger = logging.getLogger("contextplatform.gateway")

WINDOW_S = 60
KEY_PREFIX = "deployment-rate"


@dataclass(frozen=True)
class LimitReached:
    """A deployment at its limit for this minute: which one and when the next minute opens."""

    deployment: str
    limit: str  # "rpm" or "tpm"
    retry_after_s: int


def limited(upstream: Upstream) -> bool:
    return upstream.rpm is not None or upstream.tpm is not None


def _window() -> tuple[int, int]:
    """The current minute and the whole seconds until the next one."""
    now = time.time()
    minute = int(now // WINDOW_S)
    return minute, max(1, math.ceil((minute + 1) * WINDOW_S - now))


def _key(schema: str, name: str, minute: int, what: str) -> str:
    return f"{KEY_PREFIX}:{schema}:{name}:{minute}:{what}"


def _add(key: str, delta: int) -> int:
    # ``add`` writes a missing key only: of two calls opening a minute, one opens it, the other
    # counts in it. The key outlives its minute a little, so a late ``spend`` still finds it.
    for _ in range(2):
        if cache.add(key, delta, timeout=WINDOW_S * 2):
            return delta
        try:
            return int(cache.incr(key, delta))
        except ValueError:  # expired between add and incr
            continue
    return delta


def admit_now(schema: str, upstream: Upstream) -> LimitReached | None:
    """Count one request to ``upstream``; a ``LimitReached`` (and nothing sent) at its limit."""
    if not limited(upstream):
        return None
    minute, retry_after = _window()
    try:
        if upstream.tpm is not None:
            spent = cache.get(_key(schema, upstream.name, minute, "tokens")) or 0
            if int(spent) >= upstream.tpm:
                return LimitReached(upstream.name, "tpm", retry_after)
        requests = _key(schema, upstream.name, minute, "requests")
        if upstream.rpm is not None and _add(requests, 1) > upstream.rpm:
            return LimitReached(upstream.name, "rpm", retry_after)
    except Exception:
        logger.warning("the deployment limit's cache failed; call let through", exc_info=True)
    return None


def spend_now(schema: str, upstream: Upstream, tokens: int) -> None:
    """Count the tokens an answer of ``upstream`` reported against its ``tpm``."""
    if upstream.tpm is None or tokens <= 0:
        return
    minute, _ = _window()
    try:
        _add(_key(schema, upstream.name, minute, "tokens"), tokens)
    except Exception:
        logger.warning("the deployment limit's cache failed; tokens not counted", exc_info=True)


async def admit(schema: str, upstream: Upstream) -> LimitReached | None:
    if not limited(upstream):
        return None
    # Off the loop: the count is a cache round trip (Redis), never the tenant's database.
    return await sync_to_async(admit_now, thread_sensitive=False)(schema, upstream)


async def spend(schema: str, upstream: Upstream, tokens: int) -> None:
    if upstream.tpm is None or tokens <= 0:
        return
    await sync_to_async(spend_now, thread_sensitive=False)(schema, upstream, tokens)


__all__ = ["LimitReached", "admit", "admit_now", "limited", "spend", "spend_now"]
