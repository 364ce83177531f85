"""The read replica (``DATABASE_REPLICA_URL``): the reads that tolerate lag (spend, source health,
the replay list) go to the ``replica`` alias, in the request's tenant's schema; a read that must
see a write just made stays on ``default``; nothing migrates through the replica.

The ``replica`` alias here is a second connection to the test database, added for each test as
settings add it from ``DATABASE_REPLICA_URL`` (``contextplatform/database.py``, replica_config):
routing and schema are what is proven, not PostgreSQL's replication. That connection is outside
the test's transaction, so what a test reads through it, it writes through it, in a transaction
of its own rolled back at the end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, connections, router, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.database import replica_config
from contextplatform.database_routing import REPLICA, lag_tolerant
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.source_health.compute import LATENCY_BOUNDS_MS
from contextplatform.replay.source_health.models import SourceHealthMinute
from tests.conftest import ApiClient, TenantFixture
from tests.resolve.api.test_resolve import RULES, make_route

NOW = datetime.now(UTC)


@pytest.fixture
def replica(db: Any) -> Iterator[Any]:
    """A ``replica`` alias on the test database, as ``DATABASE_REPLICA_URL`` would add it."""
    default = connections["default"].settings_dict
    url = f"postgresql://{default['USER']}@/{default['NAME']}?host={default['HOST']}"
    if default["PORT"]:
        url = url.replace("@/", f"@:{default['PORT']}/")
    os.environ["DATABASE_REPLICA_URL"] = url
    try:
        config = replica_config(default)
    finally:
        del os.environ["DATABASE_REPLICA_URL"]
    assert config is not None and config["ENGINE"] == default["ENGINE"]
    connections.settings[REPLICA] = config
    wrapper = connections[REPLICA]
    # Django's test case refuses to open a connection for an alias it was not told of when it
    # started (pytest-django's mark needs the alias to exist before this fixture can add it);
    # one opened here, before the first query, is used as any other.
    wrapper.connect()
    try:
        with transaction.atomic(using=REPLICA):
            yield wrapper
            transaction.set_rollback(True, using=REPLICA)
    finally:
        wrapper.close()
        if wrapper.pool is not None:
            wrapper.close_pool()
        del connections[REPLICA]
        del connections.settings[REPLICA]


def through_replica(tenant: TenantFixture, *rows: Any) -> None:
    """Rows written through the replica's connection, in ``tenant``'s schema."""
    connections[REPLICA].set_tenant(tenant.tenant)
    for row in rows:
        row.save(using=REPLICA, force_insert=True)


def record(cost: float, route: str = "support") -> ReplayRecord:
    return ReplayRecord(
        id=f"rsv_{uuid.uuid4().hex}",
        route=route,
        status="ok",
        format="openai",
        created_at=NOW - timedelta(hours=1),
        duration_ms=3.0,
        input_tokens=10,
        output_tokens=2,
        cost_usd=cost,
    )


def tables_read(queries: CaptureQueriesContext, table: str) -> int:
    return sum(1 for query in queries.captured_queries if table in query["sql"])


def test_without_a_replica_url_there_is_no_alias_and_reads_stay_on_default(db: Any) -> None:
    assert replica_config(connections["default"].settings_dict) is None
    assert REPLICA not in connections.settings
    assert lag_tolerant() == "default"


def test_nothing_migrates_through_the_replica(replica: Any, acme: TenantFixture) -> None:
    connection.set_schema_to_public()  # django-tenants' router answers for the current schema
    assert router.allow_migrate("default", "tenants") is True
    assert router.allow_migrate(REPLICA, "tenants") is False
    with schema_context(acme.schema):
        assert router.allow_migrate("default", "replay") is True
        assert router.allow_migrate(REPLICA, "replay") is False
    connection.set_schema_to_public()


def test_each_tenant_reads_its_own_spend_through_the_replica(
    replica: Any, acme: TenantFixture, globex: TenantFixture
) -> None:
    through_replica(acme, record(1.0), record(2.0, route="sales"))
    through_replica(globex, record(40.0, route="globex-only"))
    # The replica was last in globex's schema: acme's request must move it to acme's.
    for tenant, expected in (
        (acme, {"sales": 2.0, "support": 1.0}),
        (globex, {"globex-only": 40.0}),
    ):
        with (
            CaptureQueriesContext(connections["default"]) as on_default,
            CaptureQueriesContext(replica) as on_replica,
        ):
            response = ApiClient(tenant.key).get("/api/v1/spend")
        assert response.status_code == 200, response.content
        assert {row["group"]: row["cost_usd"] for row in response.json()["rows"]} == expected
        assert tables_read(on_replica, ReplayRecord._meta.db_table) == 1
        assert tables_read(on_default, ReplayRecord._meta.db_table) == 0
        assert replica.schema_name == tenant.schema


def test_the_replay_list_reads_through_the_replica_in_the_tenants_schema(
    replica: Any, acme: TenantFixture, globex: TenantFixture
) -> None:
    mine = record(1.0, route="listed")
    through_replica(acme, mine)
    through_replica(globex, record(1.0, route="listed"))
    with CaptureQueriesContext(replica) as on_replica:
        response = ApiClient(acme.key).get("/api/v1/replay", {"route": "listed"})
    assert response.status_code == 200, response.content
    assert [row["id"] for row in response.json()["data"]] == [mine.id]
    assert tables_read(on_replica, ReplayRecord._meta.db_table) == 1


def test_source_health_reads_through_the_replica_in_the_tenants_schema(
    replica: Any, acme: TenantFixture, globex: TenantFixture
) -> None:
    minute = timezone.now().replace(second=0, microsecond=0)
    counts = {"ok": 3, "latency": [0] * len(LATENCY_BOUNDS_MS), "max_ms": 5.0}
    through_replica(
        acme, SourceHealthMinute(route="watched", source="docs", minute=minute, **counts)
    )
    with CaptureQueriesContext(replica) as on_replica:
        acme_rows = ApiClient(acme.key).get("/api/v1/sources/health").json()["data"]
        globex_rows = ApiClient(globex.key).get("/api/v1/sources/health").json()["data"]
    # Other tests' committed records may have left acme's health rows of their own: only this
    # test's row is asked about.
    assert ("watched", "docs") in [(row["route"], row["source"]) for row in acme_rows]
    assert ("watched", "docs") not in [(row["route"], row["source"]) for row in globex_rows]
    assert tables_read(on_replica, SourceHealthMinute._meta.db_table) >= 2


def test_a_route_read_right_after_its_put_stays_on_default(
    replica: Any, acme_api: ApiClient
) -> None:
    make_route(acme_api, "fresh", [RULES])
    brief = {**RULES, "texts": ["Be brief."]}
    changed = {"name": "fresh", "context": {"sources": [brief]}}
    with CaptureQueriesContext(replica) as on_replica:
        assert acme_api.put("/api/v1/routes/fresh", changed).status_code == 200
        response = acme_api.get("/api/v1/routes/fresh")
    assert response.status_code == 200, response.content
    assert response.json()["context"]["sources"][0]["texts"] == ["Be brief."]
    assert on_replica.captured_queries == []


def test_a_schema_context_without_a_tenant_object_is_followed(
    replica: Any, acme: TenantFixture
) -> None:
    with schema_context(acme.schema):
        assert lag_tolerant() == REPLICA
        assert replica.schema_name == acme.schema == connection.schema_name
    connection.set_schema_to_public()
    assert lag_tolerant() == REPLICA and replica.schema_name == "public"
