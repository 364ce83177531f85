"""A deployment's ``limits`` (requests and tokens a minute) on the gateway's calls: before a call
is sent to a deployment with limits, its minute's counts are read; at either limit the deployment
is skipped for the call (``fallback.first_answer`` tries the next one, and answers 429
``rate_limited`` when every deployment of the call was skipped).

A fixed window per clock minute, per tenant schema and deployment, counted by the one per-minute
counter (``contextplatform/core/minute_counts.py``) in Django's cache: Redis with ``REDIS_URL``
(shared by every worker; ``INCR`` is atomic), else this process's memory.
``rpm`` counts each request sent. ``tpm`` counts the tokens the provider reported (input and
output) once the answer is in (``spend``): the reported usage is what the provider's own limit
counts, and it is the only number known for the output; a call is let through while its minute's
reported tokens are under the limit, so the calls in flight when it is reached may pass it by
their own size. A deployment without limits costs nothing here (no cache trip). The cache failing
lets calls through, as the per-key limit does (tenants/rate_limits.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from contextplatform.core import minute_counts
from contextplatform.deployments.selectors import Upstream

logger = logging.getLogger("contextplatform.gateway")

KEY_PREFIX = "deployment-rate"


@dataclass(frozen=True)
class LimitReached:
    """A deployment at its limit for this minute: which one and when the next minute opens."""

    deployment: str
    limit: str  # "rpm" or "tpm"
    retry_after_s: int


def limited(upstream: Upstream) -> bool:
    return upstream.rpm is not None or upstream.tpm is not None


def _key(schema: str, name: str, minute: int, what: str) -> str:
    return f"{KEY_PREFIX}:{schema}:{name}:{minute}:{what}"


# The count outlives its minute a little, so a late ``spend`` still finds it.
_KEPT_S = 2 * minute_counts.WINDOW_S


def admit_now(schema: str, upstream: Upstream) -> LimitReached | None:
    """Count one request to ``upstream``; a ``LimitReached`` (and nothing sent) at its limit."""
    if not limited(upstream):
        return None
    minute, retry_after = minute_counts.clock_minute()
    try:
        if upstream.tpm is not None:
            spent = minute_counts.read(_key(schema, upstream.name, minute, "tokens"))
            if spent >= upstream.tpm:
                return LimitReached(upstream.name, "tpm", retry_after)
        requests = _key(schema, upstream.name, minute, "requests")
        if (
            upstream.rpm is not None
            and minute_counts.add(requests, 1, timeout_s=_KEPT_S) > upstream.rpm
        ):
            return LimitReached(upstream.name, "rpm", retry_after)
    except Exception:
        logger.warning("the deployment limit's cache failed; call let through", exc_info=True)
    return None


def spend_now(schema: str, upstream: Upstream, tokens: int) -> None:
    """Count the tokens an answer of ``upstream`` reported against its ``tpm``."""
    if upstream.tpm is None or tokens <= 0:
        return
    minute, _ = minute_counts.clock_minute()
    try:
        minute_counts.add(_key(schema, upstream.name, minute, "tokens"), tokens, timeout_s=_KEPT_S)
    except Exception:
        logger.warning("the deployment limit's cache failed; tokens not counted", exc_info=True)


async def admit(schema: str, upstream: Upstream) -> LimitReached | None:
    if not limited(upstream):
        return None
    # Never the tenant's database: in place, or off the loop for a Redis round trip.
    return await minute_counts.off_loop(admit_now, schema, upstream)


async def spend(schema: str, upstream: Upstream, tokens: int) -> None:
    if upstream.tpm is None or tokens <= 0:
        return
    await minute_counts.off_loop(spend_now, schema, upstream, tokens)


__all__ = ["LimitReached", "admit", "admit_now", "limited", "spend", "spend_now"]
