"""Django's Redis cache with one connection pool per process.

Django keeps a cache object per async context, and under ASGI every request is one: each request
built its own client and connection pool, opened a new TCP connection to Redis and read the
client library's version from the installed packages' metadata while doing so. The client (and its
pool, which is thread-safe) is shared here by every cache object of the process with the same
servers and options."""

from __future__ import annotations

import os
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[tuple[Any, ...], RedisCacheClient] = {}
_lock = threading.Lock()


class SharedPoolRedisCache(RedisCache):
    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (os.getpid(), tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:  # a forked child makes its own: sockets are not shared
                client = _clients[key] = self._class(self._servers, **self._options)
        return client
