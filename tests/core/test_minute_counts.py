"""The one per-minute counter (core/minute_counts.py), in Redis and in the process's own cache:
counts that open themselves and add up exactly under concurrent callers, a window opened by its
first count with its Retry-After, counts taken back only while they live, and an async caller's
count made in place only when it cannot wait on I/O."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import caches
from django.test import override_settings

from contextplatform.core import minute_counts


@pytest.fixture(params=["redis", "process"])
def cache_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "process":
        backend = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    else:
        backend = {
            "BACKEND": "contextplatform.core.redis_cache.SharedPoolRedisCache",
            "LOCATION": request.getfixturevalue("redis_url"),
        }
    with override_settings(CACHES={"default": backend}):
        yield request.param


def key() -> str:
    return f"minute-counts-test:{uuid.uuid4().hex}"


def test_concurrent_adds_open_the_count_once_and_add_up(cache_kind: str) -> None:
    counted = key()
    with ThreadPoolExecutor(8) as workers:
        totals = list(workers.map(lambda _: minute_counts.add(counted, 3), range(40)))
    assert sorted(totals) == list(range(3, 121, 3))  # every caller saw its own total
    assert minute_counts.read(counted) == 120


def test_adjust_takes_back_while_the_count_lives_and_never_recreates_it(cache_kind: str) -> None:
    counted = key()
    minute_counts.add(counted, 10)
    minute_counts.adjust(counted, -4)
    assert minute_counts.read(counted) == 6
    missing = key()
    minute_counts.adjust(missing, -4)  # expired (or never opened): nothing to correct
    assert caches["default"].get(missing) is None
    assert minute_counts.read(missing) == 0


def test_a_window_opened_by_its_first_count_says_when_it_closes(cache_kind: str) -> None:
    window = key()
    assert [minute_counts.window_count(window) for _ in range(3)] == [1, 2, 3]
    assert 1 <= minute_counts.window_retry_after_s(window) <= minute_counts.WINDOW_S
    assert minute_counts.window_retry_after_s(key()) == 1  # unknown: retry soon


def test_the_clock_minute_and_the_seconds_to_the_next() -> None:
    assert minute_counts.clock_minute(120.0) == (2, 60)
    assert minute_counts.clock_minute(179.5) == (2, 1)


def test_an_async_count_stays_on_the_loop_only_for_the_process_cache(cache_kind: str) -> None:
    async def counted_on() -> str:
        return await minute_counts.off_loop(lambda: threading.current_thread().name)

    loop_thread = threading.current_thread().name  # asyncio.run runs the loop on this thread
    on = asyncio.run(counted_on())
    assert minute_counts.in_process() is (cache_kind == "process")
    assert (on == loop_thread) is (cache_kind == "process")
