"""Each source's health per route over HTTP (GET /api/v1/sources/health, /metrics) on real
PostgreSQL: the window against the baseline, and the alerts as traffic raises them."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from django_tenants.utils import schema_context
from prometheus_client import REGISTRY

from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.source_health.compute import window_start
from contextplatform.replay.source_health.models import SourceHealthMinute, SourceHealthStreak
from contextplatform.replay.source_health.retention import (
    prune_source_health,
    prune_source_health_task,
)
from contextplatform.replay.writer import REPLAY_WRITER, write_now
from tests.conftest import ApiClient, TenantFixture
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers test_sleep)
from tests.resolve.api.test_resolve import RULES, make_route, resolved

pytestmark = pytest.mark.django_db(transaction=False)


def health(api: ApiClient, route: str | None = None) -> list[dict[str, Any]]:
    response = api.get("/api/v1/sources/health", {"route": route} if route else None)
    assert response.status_code == 200, response.content
    return response.json()["data"]


def one(api: ApiClient, route: str, source: str) -> dict[str, Any]:
    rows = [row for row in health(api, route) if row["source"] == source]
    assert len(rows) == 1, rows
    return rows[0]


def set_items(api: ApiClient, route: str, source: dict[str, Any]) -> None:
    response = api.put(
        f"/api/v1/routes/{route}", {"name": route, "context": {"sources": [RULES, source]}}
    )
    assert response.status_code == 200, response.content


def gauge(tenant: str, route: str, source: str, alert: str) -> float | None:
    labels = {"tenant": tenant, "route": route, "source": source, "alert": alert}
    return REGISTRY.get_sample_value("context_source_health_alert", labels)


def test_a_source_that_stops_returning_hits_is_flagged_after_its_run_of_empties(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    docs = {"type": "test_sleep", "name": "docs", "items": ["Parcels ship in 2 days."]}
    make_route(acme_api, "feed", [RULES, docs])
    for _ in range(10):
        resolved(acme_api, "feed")
    assert one(acme_api, "feed", "docs")["alert"] is None

    set_items(acme_api, "feed", {**docs, "items": []})
    for _ in range(29):
        resolved(acme_api, "feed")
    before = one(acme_api, "feed", "docs")
    assert before["empty_streak"] == 29
    assert before["alert"] is None  # one short of the run that flags it

    resolved(acme_api, "feed")
    flagged = one(acme_api, "feed", "docs")
    assert flagged["alert"] == "stopped_returning_hits"
    assert flagged["requests"] == 40
    assert flagged["ok_rate"] == 0.25
    assert flagged["empty_rate"] == 0.75

    # /metrics says so too, for this tenant's route and source.
    metrics = Client().get("/metrics").content.decode()
    assert "context_source_health_alert{" in metrics
    assert gauge(acme.schema, "feed", "docs", "stopped_returning_hits") == 1.0
    assert gauge(acme.schema, "feed", "docs", "failing") == 0.0

    # One hit ends the run and the alert.
    set_items(acme_api, "feed", docs)
    resolved(acme_api, "feed")
    recovered = one(acme_api, "feed", "docs")
    assert recovered["alert"] is None and recovered["empty_streak"] == 0
    assert gauge(acme.schema, "feed", "docs", "stopped_returning_hits") == 0.0


def test_a_source_empty_from_the_start_is_not_flagged(acme_api: ApiClient) -> None:
    make_route(acme_api, "quiet", [RULES, {"type": "test_sleep", "name": "nothing"}])
    for _ in range(35):
        resolved(acme_api, "quiet")
    row = one(acme_api, "quiet", "nothing")
    assert row["empty_streak"] == 35 and row["empty_rate"] == 1.0
    assert row["alert"] is None


def test_failing_and_healthy_sources(acme_api: ApiClient, acme: TenantFixture) -> None:
    broken = {"type": "test_sleep", "name": "broken", "fail": True}
    fine = {"type": "test_sleep", "name": "fine", "items": ["one", "two"]}
    make_route(acme_api, "mixed", [RULES, broken, fine])
    for count in range(1, 6):
        resolved(acme_api, "mixed")
        if count == 4:  # under the minimum of failed requests
            assert one(acme_api, "mixed", "broken")["alert"] is None
    failing = one(acme_api, "mixed", "broken")
    assert failing["alert"] == "failing"
    assert failing["failed_rate"] == 1.0 and failing["requests"] == 5
    healthy = one(acme_api, "mixed", "fine")
    assert healthy["alert"] is None
    assert healthy["ok_rate"] == 1.0 and healthy["kept_per_request"] == 2.0
    # the guardrails source is a source too: healthy, counted per request
    assert one(acme_api, "mixed", "rules")["alert"] is None
    assert gauge(acme.schema, "mixed", "broken", "failing") == 1.0
    assert gauge(acme.schema, "mixed", "fine", "failing") == 0.0


def record(
    at_minutes_ago: float, outcomes: list[tuple[str, float, int]], route: str = "known"
) -> ReplayRecord:
    """A replay record of ``route`` whose source ``docs`` answered (status, ms, kept)."""
    status, ms, kept = outcomes[0]
    created = timezone.now() - timedelta(minutes=at_minutes_ago)
    return ReplayRecord(
        id=f"rsv_t{uuid.uuid4().hex[:24]}",
        route=route,
        status="ok",
        format="openai",
        created_at=created,
        duration_ms=ms,
        sources=[
            {"name": "docs", "type": "rag", "status": status, "items": 1, "ms": ms, "kept": kept}
        ],
    )


def test_window_and_baseline_on_a_known_sequence(acme_api: ApiClient, acme: TenantFixture) -> None:
    # The baseline: two days ago, 8 hits at 10 ms (one item kept each) and 2 empty at 20 ms;
    # 8 days ago (outside the baseline) a failure that must not count.
    sequence = [(2 * 24 * 60 + i * 0.01, ("ok", 10.0, 1)) for i in range(8)]
    sequence += [(2 * 24 * 60 + 1 + i * 0.01, ("empty", 20.0, 0)) for i in range(2)]
    sequence += [(8 * 24 * 60, ("failed", 5.0, 0))]
    # The window: 10 minutes ago, 2 hits at 300 ms (2 kept each), one empty, one timeout.
    sequence += [(10 + i * 0.01, ("ok", 300.0, 2)) for i in range(2)]
    sequence += [(10.5, ("empty", 40.0, 0)), (10.6, ("timeout", 900.0, 0))]
    for minutes_ago, outcome in sequence:
        write_now(acme.schema, record(minutes_ago, [outcome]))

    row = one(acme_api, "known", "docs")
    assert row["window_minutes"] == 60
    assert row["requests"] == 4
    assert (row["ok_rate"], row["empty_rate"], row["failed_rate"], row["timeout_rate"]) == (
        0.5,
        0.25,
        0.0,
        0.25,
    )
    assert row["kept_per_request"] == 1.0
    assert 200.0 < row["p95_ms"] <= 900.0  # in the bucket of the slowest
    base = row["baseline"]
    assert base["requests"] == 10
    assert (base["ok_rate"], base["empty_rate"], base["failed_rate"], base["timeout_rate"]) == (
        0.8,
        0.2,
        0.0,
        0.0,
    )
    assert base["kept_per_request"] == 0.8
    assert 10.0 < base["p95_ms"] <= 20.0
    assert row["alert"] is None  # too few requests to call it slow

    # Pruning keeps the baseline's week and drops what is older.
    assert prune_source_health()["minutes"] == 1
    assert one(acme_api, "known", "docs")["baseline"]["requests"] == 10
    # The hourly task does it in every tenant's schema (nothing left to prune now).
    assert prune_source_health_task()["acme"]["minutes"] == 0


def test_a_slow_source_against_its_baseline(acme_api: ApiClient, acme: TenantFixture) -> None:
    for i in range(20):
        write_now(acme.schema, record(3 * 60 + i * 0.01, [("ok", 30.0, 1)], route="slowpoke"))
    for i in range(20):
        write_now(acme.schema, record(5 + i * 0.01, [("ok", 400.0, 1)], route="slowpoke"))
    row = one(acme_api, "slowpoke", "docs")
    assert row["alert"] == "slow"
    assert row["p95_ms"] > 2 * row["baseline"]["p95_ms"]


def test_the_window_is_the_last_hour(acme: TenantFixture) -> None:
    now = timezone.now()
    assert now - window_start(now) < timedelta(minutes=60)
    assert now - window_start(now) >= timedelta(minutes=59)


def test_tenants_see_only_their_own_sources(acme_api: ApiClient, globex_api: ApiClient) -> None:
    make_route(
        acme_api, "private", [RULES, {"type": "test_sleep", "name": "secret", "items": ["x"]}]
    )
    resolved(acme_api, "private")
    assert [r["source"] for r in health(acme_api, "private")] == ["rules", "secret"]
    # (globex may hold rows other tests' live servers committed: none of them is acme's route)
    assert "private" not in {r["route"] for r in health(globex_api)}
    assert health(globex_api, "private") == []


def test_needs_replay_read(anonymous_api: ApiClient) -> None:
    assert anonymous_api.get("/api/v1/sources/health").status_code == 401


def delete_committed(schema: str, route: str) -> None:
    """On a connection of its own: the background writer committed past the test's transaction."""

    def delete() -> None:
        try:
            with schema_context(schema):
                ReplayRecord.objects.filter(route=route).delete()
                SourceHealthMinute.objects.filter(route=route).delete()
                SourceHealthStreak.objects.filter(route=route).delete()
        finally:
            connection.close()

    worker = threading.Thread(target=delete)
    worker.start()
    worker.join()


def test_the_background_writer_counts_its_batches_in_order(
    acme_api: ApiClient, acme: TenantFixture, settings: Any
) -> None:
    settings.REPLAY_WRITES = "background"
    route = f"batched-{uuid.uuid4().hex[:8]}"
    try:
        # Hits, then empties after them (in one batch or several, as the writer takes them).
        first = [record(0.5 - i * 0.01, [("ok", 5.0, 1)], route=route) for i in range(3)]
        first += [record(0.2 - i * 0.01, [("empty", 5.0, 0)], route=route) for i in range(2)]
        for one_record in first:
            REPLAY_WRITER.submit(acme.schema, one_record)
        assert REPLAY_WRITER.flush(acme.schema)
        REPLAY_WRITER.submit(acme.schema, record(0.0, [("empty", 5.0, 0)], route=route))
        assert REPLAY_WRITER.flush(acme.schema)
        row = one(acme_api, route, "docs")
        assert row["requests"] == 6 and row["ok_rate"] == 0.5
        assert row["empty_streak"] == 3
    finally:
        delete_committed(acme.schema, route)


def test_a_batch_is_counted_in_time_order_whatever_order_it_arrived_in() -> None:
    from contextplatform.replay.source_health.aggregate import tally

    records = [record(0.5 - i * 0.01, [("ok", 5.0, 1)], route="r") for i in range(3)]
    records += [record(0.2 - i * 0.01, [("empty", 5.0, 0)], route="r") for i in range(2)]
    records.append(record(0.1, [("failed", 5.0, 0)], route="r"))  # neither extends nor ends it
    _, streaks = tally(reversed(records))
    assert streaks[("r", "docs")].empties == 2
    assert streaks[("r", "docs")].last_hit_at == records[2].created_at
