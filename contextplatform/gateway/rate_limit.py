"""The per-key request rate limit (``tenants.rate_limits``) on the gateway's endpoints: 429 with
``Retry-After`` in the provider's error shape, so the official clients raise ``RateLimitError``
(and, retrying, wait as long as they are told)."""

from __future__ import annotations

from django.http import HttpRequest

from contextplatform.core import minute_counts
from contextplatform.gateway.key_limits import key_rate_refusal
from contextplatform.gateway.protocol import GatewayError
from tenants import rate_limits


async def check_rate(request: HttpRequest) -> None:
    """Count the request against the platform's limit and the key's own ``rate_limit.rpm``
    (nothing to do when neither is set)."""
    api_key = getattr(request, "api_key", None)
    if api_key is None:
        return
    if api_key.rate_limit_rpm:
        refused = await minute_counts.off_loop(key_rate_refusal, api_key)
        if refused is not None:
            raise refused
    if not rate_limits.enabled():
        return
    # Never on the request's thread: the count touches the cache only, never the tenant's
    # database (in place when the cache is this process's memory).
    limited = await minute_counts.off_loop(rate_limits.refusal, api_key.pk)
    if limited is not None:
        raise GatewayError(429, "rate_limited", limited.message, headers=limited.headers)
