"""A key's own rate limit (``rate_limit.rpm``, ``rate_limit.tpm``), beside the platform's limit
for every key (``tenants.rate_limits``).

Both are counted in Django's cache: Redis with ``REDIS_URL`` (shared by every worker; ``INCRBY``
is atomic, so concurrent calls never both take the last of a minute), else this process's memory.

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
import math
import time
from dataclasses import dataclass

from django.core.cache import cache

from tenants.models import ApiKey
from tenants.rate_limits import RateLimited

logger = logging.getLogger("contextplatform.api")

WINDOW_S = 60
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


def _open_or_count(count_key: str, opened_key: str) -> int:
    if cache.add(count_key, 1, timeout=WINDOW_S):
        cache.set(opened_key, time.time(), timeout=WINDOW_S)
        return 1
    return int(cache.incr(count_key))


def rpm_refusal(api_key: ApiKey) -> RateLimited | None:
    """Count one request of the key against its ``rate_limit.rpm``; no cache trip without one."""
    limit = api_key.rate_limit_rpm
    if not limit:
        return None
    count_key, opened_key = f"{RPM_PREFIX}:{api_key.pk}:count", f"{RPM_PREFIX}:{api_key.pk}:opened"
    try:
        try:
            count = _open_or_count(count_key, opened_key)
        except ValueError:  # the window closed between add and incr
            count = _open_or_count(count_key, opened_key)
        if count <= limit:
            return None
        opened = cache.get(opened_key)
        retry = math.ceil(opened + WINDOW_S - time.time()) if isinstance(opened, float) else 1
        return KeyRequestsLimited(limit=limit, retry_after_s=max(1, retry))
    except Exception:
        logger.warning("the key rate limit's cache failed; request let through", exc_info=True)
        return None


@dataclass(frozen=True)
class TokenHold:
    """Tokens a call holds in one minute's count of its key."""

    window: str
    tokens: int


def _minute() -> int:
    return int(time.time() // WINDOW_S)


def hold_tokens(api_key: ApiKey, tokens: int) -> TokenHold | TokensLimited | None:
    """Hold ``tokens`` in the key's current minute; ``TokensLimited`` when they do not fit;
    ``None`` when the key sets no ``tpm`` (or the cache failed)."""
    limit = api_key.rate_limit_tpm
    if not limit:
        return None
    tokens = max(int(tokens), 0)
    window = f"{TPM_PREFIX}:{api_key.pk}:{_minute()}"
    try:
        cache.add(window, 0, timeout=2 * WINDOW_S)
        total = int(cache.incr(window, tokens))
        if total > limit:
            cache.decr(window, tokens)
            retry = max(1, math.ceil(WINDOW_S - time.time() % WINDOW_S))
            return TokensLimited(limit=limit, retry_after_s=retry, tokens=tokens)
        return TokenHold(window=window, tokens=tokens)
    except Exception:
        logger.warning("the key token limit's cache failed; call let through", exc_info=True)
        return None


def settle_tokens(hold: TokenHold, used: int | None) -> None:
    """Replace the hold by what the call used (``None``: it failed, nothing was used). A call
    that ran into the next minute is counted in the minute it was admitted in."""
    delta = (max(used, 0) if used is not None else 0) - hold.tokens
    if not delta:
        return
    try:
        cache.incr(hold.window, delta)
    except ValueError:
        pass  # the minute's count expired: nothing left to correct
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
