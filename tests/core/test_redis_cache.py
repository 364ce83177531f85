"""The Redis cache shares one client per process, and retrievals read through a short-lived copy
in this process (``sources.rag.cache``) instead of a round trip at every resolve."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from django.core.cache import caches
from django.test import override_settings

from contextplatform.core.redis_cache import SharedPoolRedisCache
from sources.rag import cache as rag_cache


@pytest.fixture
def redis_cache(redis_url: str) -> Iterator[SharedPoolRedisCache]:
    backend = {"BACKEND": "contextplatform.core.redis_cache.SharedPoolRedisCache"}
    with override_settings(CACHES={"default": {**backend, "LOCATION": redis_url}}):
        cache = caches["default"]
        assert isinstance(cache, SharedPoolRedisCache)
        yield cache
    rag_cache.FRONT.clear()


def test_one_redis_client_serves_every_operation(redis_cache: SharedPoolRedisCache) -> None:
    client = redis_cache._cache.get_client("a")
    assert redis_cache._cache.get_client("b") is client
    assert redis_cache._cache.get_client("c", write=True) is client  # one server: one pool
    redis_cache.set("shared-client", 1, 30)
    assert redis_cache.get("shared-client") == 1


def test_a_retrieval_is_read_from_this_process_after_the_first_read(
    redis_cache: SharedPoolRedisCache,
) -> None:
    key = f"rag:test-{uuid.uuid4().hex}"
    redis_cache.set(key, [{"item": "from redis"}], 30)  # written by another process
    assert asyncio.run(rag_cache.get(key)) == [{"item": "from redis"}]
    redis_cache.delete(key)
    # Held here for FRONT_TTL_S: the key names the documents' change token, so it is not stale.
    assert asyncio.run(rag_cache.get(key)) == [{"item": "from redis"}]
    rag_cache.FRONT.delete(key)
    assert asyncio.run(rag_cache.get(key)) is None


def test_a_written_retrieval_lands_in_redis_and_here(redis_cache: SharedPoolRedisCache) -> None:
    key = f"rag:test-{uuid.uuid4().hex}"
    asyncio.run(rag_cache.put(key, [{"item": "kept"}], 30))
    assert redis_cache.get(key) == [{"item": "kept"}]
    assert rag_cache.FRONT.get(key) == [{"item": "kept"}]
