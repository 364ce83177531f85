"""Django's Redis cache with one connection pool per process.

Django keeps a cache object per async context, and under ASGI every request is one: each request
built its own client and connection pool, opened a new TCP connection to Redis and read the
client library's version from the installed packages' metadata while doing so. The client (and its
pool, which is thread-safe) is shared here by every cache object of the process with the same
servers and options, and so is the client object over each pool: Django's client made a new one
for every operation, which cost more than the command's round trip."""

from __future__ import annotations

import os
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[tuple[Any, ...], RedisCacheClient] = {}
_lock = threading.Lock()


class SharedClientRedisCacheClient(RedisCacheClient):
    """One ``redis.Redis`` per connection pool (it is thread-safe: each command takes a
    connection from the pool), made on first use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redis_clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._redis_clients.get(id(pool))
        if client is None:
            client = self._redis_clients.setdefault(id(pool), self._client(connection_pool=pool))
        return client


class SharedPoolRedisCache(RedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (os.getpid(), tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:  # a forked child makes its own: sockets are not shared
                client = _clients[key] = self._class(self._servers, **self._options)
        return client
