"""A deployment's ``limits`` counted in the cache (gateway/deployment_limits.py): in Redis, shared
by whoever counts, exactly ``rpm`` of many concurrent calls admitted in a minute, and ``tpm``
closed once the reported tokens reach it; the same in the process's own cache without Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import caches
from django.test import override_settings

from contextplatform.core.minute_counts import WINDOW_S
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway import deployment_limits
from contextplatform.gateway.deployment_limits import admit_now, spend_now
from tests.gateway.test_balancing import within_one_minute

SCHEMA = "limits_test"


def upstream(rpm: int | None = None, tpm: int | None = None) -> Upstream:
    return Upstream(
        protocol="openai",
        base_url="http://127.0.0.1:9/v1",
        model="m",
        api_key=None,
        timeout_ms=1000,
        context_window=8000,
        max_output_tokens=None,
        headers={},
        may_judge=False,
        name=f"limited-{uuid.uuid4().hex[:8]}",
        rpm=rpm,
        tpm=tpm,
    )


@pytest.fixture(params=["redis", "process"])
def cache_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "process":
        backend = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    else:
        url = request.getfixturevalue("redis_url")
        backend = {
            "BACKEND": "contextplatform.core.redis_cache.SharedPoolRedisCache",
            "LOCATION": url,
        }
    with override_settings(CACHES={"default": backend}):
        yield request.param


def test_exactly_rpm_of_many_concurrent_calls_are_admitted(cache_kind: str) -> None:
    within_one_minute()
    limited = upstream(rpm=7)
    with ThreadPoolExecutor(10) as workers:
        refusals = list(workers.map(lambda _: admit_now(SCHEMA, limited), range(30)))
    admitted = [r for r in refusals if r is None]
    assert len(admitted) == 7
    refused = [r for r in refusals if r is not None]
    assert {r.limit for r in refused} == {"rpm"}
    assert all(1 <= r.retry_after_s <= WINDOW_S for r in refused)
    if cache_kind == "redis":  # counted where every worker reads it
        minute = int(time.time() // WINDOW_S)
        key = deployment_limits._key(SCHEMA, limited.name, minute, "requests")
        assert int(caches["default"].get(key)) == 30


def test_tpm_closes_once_the_reported_tokens_reach_it(cache_kind: str) -> None:
    within_one_minute()
    limited = upstream(tpm=100)
    assert admit_now(SCHEMA, limited) is None
    spend_now(SCHEMA, limited, 60)
    assert admit_now(SCHEMA, limited) is None  # 60 < 100
    spend_now(SCHEMA, limited, 40)
    reached = admit_now(SCHEMA, limited)
    assert reached is not None and reached.limit == "tpm"
    assert reached.deployment == limited.name


def test_a_deployment_without_limits_is_never_counted(cache_kind: str) -> None:
    free = upstream()
    assert all(admit_now(SCHEMA, free) is None for _ in range(50))
    spend_now(SCHEMA, free, 10**9)
    assert not deployment_limits.limited(free)
