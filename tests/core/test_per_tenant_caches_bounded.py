"""What a process keeps per tenant schema stays bounded however many tenants it serves: a web
worker that touches thousands of tenants keeps the most recent ones, never one entry for each."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cachetools import LRUCache, TTLCache
from django.db import connection

from contextplatform.core import config_cache
from contextplatform.postgresql import base as engine
from contextplatform.replay.source_health import gauges
from tests.conftest import TenantFixture
from tests.core.test_config_cache import outside_the_test_transaction

KEPT = 8
TOUCHED = 3 * KEPT


def current_search_path() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW search_path")
        return str(cursor.fetchone()[0])


def test_the_search_paths_a_worker_remembers_are_bounded(
    acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_reported_search_path", LRUCache(maxsize=KEPT))
    # PostgreSQL accepts schemas that do not exist in a search_path: many tenants, cheaply.
    names = [f"scale_t{index}" for index in range(TOUCHED)]
    for name in names:
        connection.set_schema(name)
        assert current_search_path() == f"{name}, public"
    assert len(engine._reported_search_path) == KEPT
    assert (names[-1], "public") in engine._reported_search_path
    # A schema whose entry was dropped is set again, not assumed.
    connection.set_schema(names[0])
    assert current_search_path() == f"{names[0]}, public"
    connection.set_schema(acme.schema)
    assert current_search_path() == f"{acme.schema}, public"
    assert len(engine._reported_search_path) == KEPT


def test_the_source_health_baselines_a_worker_keeps_are_bounded(
    in_acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        gauges,
        "_baselines",
        TTLCache(maxsize=KEPT, ttl=gauges.BASELINE_KEPT_S, timer=time.monotonic),
    )
    for index in range(TOUCHED):
        gauges.refresh([(f"scale_route_{index}", "docs")])
    assert len(gauges._baselines) == KEPT
    assert (in_acme.schema, (f"scale_route_{TOUCHED - 1}", "docs")) in gauges._baselines


def test_every_process_cache_drops_its_least_recent_past_its_bound(db: Any) -> None:
    assert config_cache.wait_until_listening()
    cache: config_cache.ProcessCache[str, int] = config_cache.ProcessCache(
        "scale_bounded_test", max_entries=KEPT
    )
    try:
        # Read as a request reads (outside a transaction): what is read inside one is never kept.
        for index in range(TOUCHED):
            got = outside_the_test_transaction(
                lambda index=index: cache.get(f"schema_{index}", lambda: index)
            )
            assert got == index
        assert len(cache) == KEPT
        assert cache.peek(f"schema_{TOUCHED - 1}") == (True, TOUCHED - 1)
        assert cache.peek("schema_0") == (False, None)
    finally:
        config_cache._caches.pop("scale_bounded_test", None)
    for name, kept in config_cache._caches.items():
        assert 0 < kept.max_entries <= 100_000, name


def test_the_vector_collections_a_worker_has_opened_are_bounded() -> None:
    from sources.rag import milvus, qdrant
    from sources.rag.vector_backends import OpenedCollections

    assert isinstance(milvus._OPENED, OpenedCollections)
    assert isinstance(qdrant._OPENED, OpenedCollections)
    opened: OpenedCollections[int] = OpenedCollections(limit=KEPT)
    key = ("http://milvus.internal:19530",)
    # On the platform's server every tenant's collection is one of its own: <schema>__<name>.
    for index in range(TOUCHED):
        opened[(key, f"scale_t{index}__docs")] = index
        assert opened.get((key, f"scale_t{index}__docs")) == index
    assert len(opened) == KEPT
    assert opened.get((key, "scale_t0__docs")) is None
    assert opened.get((key, f"scale_t{TOUCHED - 1}__docs")) == TOUCHED - 1
