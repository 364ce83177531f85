"""The one per-minute counter every rate limit counts with: the platform's limit per key
(``tenants/rate_limits.py``), a key's own requests and tokens a minute (``tenants/key_rates.py``)
and a deployment's ``limits`` (``contextplatform/gateway/deployment_limits.py``).

Counted in Django's cache: Redis with ``REDIS_URL`` (shared by every worker; ``INCRBY`` is atomic,
so concurrent calls never both take the last of a minute), else this process's memory. Two kinds
of window:

* a clock minute (``clock_minute``): the count's key names the minute, so a new minute is a new
  count;
* a window opened by its first count (``window_count``): the count lives a minute from then, and
  when it opened is kept beside it for the ``Retry-After`` of a refusal.

``add`` is the step both share: the count created by the first caller (``add`` writes a missing key
only: of two calls opening a window at once, one opens it and the other counts in it), else
incremented, and created again when it expired between the two.

``off_loop``: a count in this process's memory is a dictionary's lookup under a lock, cheaper than
the trip to a thread and back that a Redis round trip needs to keep the event loop free; so an
async caller runs it in place then, and on a thread only when the cache is Redis."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache

WINDOW_S = 60

P = ParamSpec("P")
T = TypeVar("T")


def clock_minute(now: float | None = None) -> tuple[int, int]:
    """The current clock minute (its number since the epoch) and the whole seconds until the
    next one opens (at least 1)."""
    now = time.time() if now is None else now
    minute = int(now // WINDOW_S)
    return minute, max(1, math.ceil((minute + 1) * WINDOW_S - now))


def add(key: str, delta: int, *, timeout_s: int = WINDOW_S) -> int:
    """``delta`` added to the count at ``key`` (created with it, living ``timeout_s``, when
    missing): the count after it. Raises what the cache raises."""
    for _ in range(2):
        if cache.add(key, delta, timeout=timeout_s):
            return delta
        try:
            return int(cache.incr(key, delta))
        except ValueError:  # expired between add and incr
            continue
    return delta


def adjust(key: str, delta: int) -> None:
    """``delta`` (negative: taken back) added to the count at ``key`` if it is still there;
    nothing when it expired."""
    if not delta:
        return
    with contextlib.suppress(ValueError):
        cache.incr(key, delta)


def window_count(key: str, delta: int = 1) -> int:
    """``delta`` counted in the window at ``key``, opened by its first count and living a minute
    (when it opened is kept for ``window_retry_after_s``): the count after it."""
    count_key = f"{key}:count"
    for _ in range(2):
        if cache.add(count_key, delta, timeout=WINDOW_S):
            cache.set(f"{key}:opened", time.time(), timeout=WINDOW_S)
            return delta
        try:
            return int(cache.incr(count_key, delta))
        except ValueError:  # the window closed between add and incr
            continue
    return delta


def window_retry_after_s(key: str) -> int:
    """Whole seconds until the window at ``key`` closes (at least 1; 1 when unknown)."""
    opened = cache.get(f"{key}:opened")
    if not isinstance(opened, float):
        return 1
    return max(1, math.ceil(opened + WINDOW_S - time.time()))


def read(key: str) -> int:
    """The count at ``key``, 0 when there is none."""
    return int(cache.get(key) or 0)


def in_process() -> bool:
    """The counts live in this process's memory (no Redis): counting never waits on I/O."""
    return isinstance(caches["default"], LocMemCache)


async def off_loop(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work`` (counting in the cache) from the event loop: in place when the counts are in
    process, else on a thread (a Redis round trip must not hold the loop)."""
    if in_process():
        return work(*args, **kwargs)
    return await sync_to_async(work, thread_sensitive=False)(*args, **kwargs)


__all__ = [
    "WINDOW_S",
    "add",
    "adjust",
    "clock_minute",
    "in_process",
    "off_loop",
    "read",
    "window_count",
    "window_retry_after_s",
]
