"""A key's own rate limit (``rate_limit.rpm``, ``rate_limit.tpm``), beside the platform's limit
for every key (``tenants.rate_limits``).

Both are counted by the one per-minute counter (``contextplatform/core/minute_counts.py``), in
Django's cache: Redis with ``REDIS_URL`` (shared by every worker; ``INCRBY`` is atomic, so
concurrent calls never both take the last of a minute), else this process's memory.

* rpm: requests in a fixed window of a minute opened by the key's first request in it, as the
  platform's limit counts them, up to the key's own number.
* tpm: tokens in the current UTC minute: a call holds its input estimate and its output allowance
  before it is sent (refused when they do not fit what the minute has left), then the hold is
  replaced by what it used (the provider's usage, else the estimate) once it answered, or given
  back when it failed.

The cache failing lets calls through, as the platform's limit does: a budget (``KeySpend``, in
the database) is what holds money, not these."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from contextplatform.core import minute_counts
from tenants.models import ApiKey
from tenants.rate_limits import RateLimited

logger = logging.getLogger("contextplatform.api")

RPM_PREFIX = "key-rpm"
TPM_PREFIX = "key-tpm"


@dataclass(frozen=True)
class TokensLimited(RateLimited):
    tokens: int = 0

    @property
    def message(self) -> str:
        return (
            f"rate limit exceeded: this API key may use {self.limit} tokens a minute and this "
            f"call needs up to {self.tokens}; retry after {self.retry_after_s} s"
        )


@dataclass(frozen=True)
class KeyRequestsLimited(RateLimited):
    @property
    def message(self) -> str:
        return (
            f"rate limit exceeded: this API key may make {self.limit} requests a minute "
            f"(its rate_limit.rpm); retry after {self.retry_after_s} s"
        )


def rpm_refusal(api_key: ApiKey) -> RateLimited | None:
    """Count one request of the key against its ``rate_limit.rpm``; no cache trip without one."""
    limit = api_key.rate_limit_rpm
    if not limit:
        return None
    window = f"{RPM_PREFIX}:{api_key.pk}"
    try:
        if minute_counts.window_count(window) <= limit:
            return None
        retry = minute_counts.window_retry_after_s(window)
        return KeyRequestsLimited(limit=limit, retry_after_s=retry)
    except Exception:
        logger.warning("the key rate limit's cache failed; request let through", exc_info=True)
        return None


@dataclass(frozen=True)
class TokenHold:
    """Tokens a call holds in one minute's count of its key."""

    window: str
    tokens: int


def hold_tokens(api_key: ApiKey, tokens: int) -> TokenHold | TokensLimited | None:
    """Hold ``tokens`` in the key's current minute; ``TokensLimited`` when they do not fit;
    ``None`` when the key sets no ``tpm`` (or the cache failed)."""
    limit = api_key.rate_limit_tpm
    if not limit:
        return None
    tokens = max(int(tokens), 0)
    minute, retry = minute_counts.clock_minute()
    window = f"{TPM_PREFIX}:{api_key.pk}:{minute}"
    try:
        # The count outlives its minute, so that a late settlement still finds it.
        total = minute_counts.add(window, tokens, timeout_s=2 * minute_counts.WINDOW_S)
        if total > limit:
            minute_counts.adjust(window, -tokens)
            return TokensLimited(limit=limit, retry_after_s=retry, tokens=tokens)
        return TokenHold(window=window, tokens=tokens)
    except Exception:
        logger.warning("the key token limit's cache failed; call let through", exc_info=True)
        return None


def settle_tokens(hold: TokenHold, used: int | None) -> None:
    """Replace the hold by what the call used (``None``: it failed, nothing was used). A call
    that ran into the next minute is counted in the minute it was admitted in."""
    delta = (max(used, 0) if used is not None else 0) - hold.tokens
    try:
        minute_counts.adjust(hold.window, delta)  # nothing when the minute's count expired
    except Exception:
        logger.warning("the key token limit's cache failed settling a call", exc_info=True)


__all__ = [
    "KeyRequestsLimited",
    "TokenHold",
    "TokensLimited",
    "hold_tokens",
    "rpm_refusal",
    "settle_tokens",
]
