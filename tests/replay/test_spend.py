"""Spend from the replay records: the record's usage columns and cost (the model's calls at the
answering deployment's price, plus its judges': the sources' and the compress stage's), and ``GET /api/v1/spend`` summing them per
route, key, deployment, user or day over a period, within the caller's tenant only."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from contextplatform.deployments.pricing import Price
from contextplatform.protocols.usage import ProviderUsage
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.usage_records import apply_usage, judge_cost, set_cost
from tests.conftest import ApiClient, TenantFixture

PRICE = Price(input_per_mtok=1.0, output_per_mtok=4.0, cached_input_per_mtok=0.5)
NOW = datetime.now(UTC)


def record(**fields: Any) -> ReplayRecord:
    values: dict[str, Any] = {
        "id": f"rsv_{uuid.uuid4().hex}",
        "route": "support",
        "status": "ok",
        "format": "openai",
        "created_at": NOW - timedelta(hours=1),
        "duration_ms": 3.0,
    }
    return ReplayRecord(**{**values, **fields})


def judged_source(cost: float | None) -> dict[str, Any]:
    usage = {"calls": 1, "input_tokens": 100, "output_tokens": 5, "cost_usd": cost}
    return {"name": "docs", "notes": {"judge": "deployment:fast", "judge_usage": usage}}


# --- a record's usage and cost -----------------------------------------------------------------


def test_usage_is_priced_at_the_answering_deployment_and_the_judge_is_added() -> None:
    row = record(sources=[judged_source(0.0002), {"name": "rules"}])
    set_cost(row, model=None)  # at resolve: the judge's calls alone
    assert row.cost_usd == pytest.approx(0.0002)

    usage = ProviderUsage(input=1_000_000, output=100_000, cached_input=400_000)
    apply_usage(row, usage, price=PRICE, deployment="gpt")
    # 600k uncached at $1, 400k cached at $0.5, 100k out at $4 per million.
    model = 0.6 + 0.2 + 0.4
    assert (row.input_tokens, row.output_tokens, row.cached_input_tokens) == (
        1_000_000,
        100_000,
        400_000,
    )
    assert row.deployment == "gpt"
    assert row.cost_usd == pytest.approx(model + 0.0002)
    assert row.tokens["cost"] == {
        "model": pytest.approx(model),
        "judge": pytest.approx(0.0002),
        "compression": None,
    }


def test_an_unpriced_deployment_leaves_the_cost_unknown_and_says_which_part() -> None:
    row = record(sources=[judged_source(None)])
    apply_usage(row, ProviderUsage(input=10, output=2), price=None)
    assert row.cost_usd is None and "cost" not in row.tokens
    assert row.input_tokens == 10

    priced_judge = record(sources=[judged_source(0.001)])
    apply_usage(priced_judge, ProviderUsage(input=10, output=2), price=None)
    assert priced_judge.cost_usd == pytest.approx(0.001)
    assert priced_judge.tokens["cost"] == {"model": None, "judge": 0.001, "compression": None}


def compress_report(cost: float | None) -> dict[str, Any]:
    usage = {"calls": 1, "input_tokens": 900, "output_tokens": 12, "cost_usd": cost}
    return {"applied": True, "judge": "deployment:fast", "judge_usage": usage}


def test_the_compress_stages_judge_is_added_as_a_part_of_its_own() -> None:
    row = record(sources=[judged_source(0.0002)], compression=compress_report(0.003))
    set_cost(row, model=None)  # at resolve: both judges' calls
    assert row.cost_usd == pytest.approx(0.0032)
    apply_usage(row, ProviderUsage(input=1_000_000, output=0), price=PRICE, deployment="gpt")
    assert row.cost_usd == pytest.approx(1.0032)
    assert row.tokens["cost"] == {
        "model": pytest.approx(1.0),
        "judge": pytest.approx(0.0002),
        "compression": pytest.approx(0.003),
    }
    unpriced = record(compression=compress_report(None))
    apply_usage(unpriced, ProviderUsage(input=10, output=2), price=None)
    assert unpriced.cost_usd is None and "cost" not in unpriced.tokens
    local = record(compression={"applied": True, "judge": "local"})
    apply_usage(local, ProviderUsage(input=1_000_000, output=0), price=PRICE)
    assert local.tokens["cost"]["compression"] is None


def test_judge_cost_sums_the_priced_judges_of_every_source() -> None:
    assert judge_cost([]) is None
    assert judge_cost([judged_source(None)]) is None
    assert judge_cost([judged_source(0.25), judged_source(None), judged_source(0.5)]) == 0.75


# --- GET /api/v1/spend ---------------------------------------------------------------------------


@pytest.fixture
def records(acme: TenantFixture) -> list[ReplayRecord]:
    rows = [
        record(
            route="support",
            user_id="ann",
            deployment="gpt",
            key_id=1,
            cost_usd=0.5,
            input_tokens=1000,
            output_tokens=100,
            cached_input_tokens=200,
        ),
        record(
            route="support",
            user_id="bob",
            deployment="gpt",
            key_id=1,
            cost_usd=0.25,
            input_tokens=500,
            output_tokens=50,
        ),
        record(
            route="sales",
            user_id="ann",
            deployment="claude",
            key_id=2,
            cost_usd=2.0,
            input_tokens=300,
            output_tokens=30,
            created_at=NOW - timedelta(days=2),
        ),
        # unpriced: counted, tokens summed, no cost
        record(
            route="sales",
            user_id="",
            deployment="local",
            key_id=2,
            cost_usd=None,
            input_tokens=70,
            output_tokens=7,
            created_at=NOW - timedelta(days=2),
        ),
        # out of the default 30 days
        record(route="old", cost_usd=9.0, input_tokens=9, created_at=NOW - timedelta(days=40)),
    ]
    with schema_context(acme.schema):
        ReplayRecord.objects.bulk_create(rows)
    connection.set_schema_to_public()
    return rows


def spend(api: ApiClient, **params: str) -> Any:
    response = api.get("/api/v1/spend", params)
    assert response.status_code == 200, response.content
    return response.json()


def test_spend_by_route_sums_the_period_costliest_first(
    acme_api: ApiClient, records: list[ReplayRecord]
) -> None:
    rows = spend(acme_api)["rows"]  # group_by=route, the last 30 days
    assert [row["group"] for row in rows] == ["sales", "support"]
    sales, support = rows
    assert support == {
        "group": "support",
        "requests": 2,
        "input_tokens": 1500,
        "output_tokens": 150,
        "cached_input_tokens": 200,
        "cost_usd": 0.75,
        "unpriced_requests": 0,
    }
    assert sales["requests"] == 2 and sales["cost_usd"] == 2.0 and sales["unpriced_requests"] == 1


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("deployment", {"claude": 2.0, "gpt": 0.75, "local": 0.0}),
        ("key", {2: 2.0, 1: 0.75}),
        ("user", {"ann": 2.5, "bob": 0.25, None: 0.0}),
    ],
)
def test_spend_groups(
    acme_api: ApiClient, records: list[ReplayRecord], group_by: str, expected: dict[Any, float]
) -> None:
    rows = spend(acme_api, group_by=group_by)["rows"]
    assert {row["group"]: row["cost_usd"] for row in rows} == expected
    costs = [row["cost_usd"] for row in rows]
    assert costs == sorted(costs, reverse=True)


def test_spend_by_day_in_date_order_within_since_and_until(
    acme_api: ApiClient, records: list[ReplayRecord]
) -> None:
    body = spend(acme_api, group_by="day", since=(NOW - timedelta(days=60)).date().isoformat())
    days = [row["group"] for row in body["rows"]]
    assert days == sorted(days) and len(days) >= 2
    assert days[0] == (NOW - timedelta(days=40)).date().isoformat()
    one_day = (NOW - timedelta(days=2)).date().isoformat()
    only = spend(acme_api, group_by="day", since=one_day, until=one_day)["rows"]
    assert [(row["group"], row["requests"]) for row in only] == [(one_day, 2)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "tenant"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"until": "9999-12-31"}, "until"),  # its end is past the calendar
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),  # before it, in UTC
        ({"since": "2026-01-01T00:00:00"}, "since"),  # no time zone
        ({"since": "2026-02-01", "until": "2026-01-01"}, "since"),
        ({"since": "2020-01-01", "until": "2026-01-01"}, "since"),  # longer than a year
    ],
)
def test_bad_spend_queries_are_400s_naming_the_field(
    acme_api: ApiClient, params: dict[str, str], field: str
) -> None:
    response = acme_api.get("/api/v1/spend", params)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == field


def test_another_tenants_records_are_not_summed(
    globex_api: ApiClient, records: list[ReplayRecord]
) -> None:
    assert spend(globex_api)["rows"] == []


def test_the_migration_fills_the_columns_of_records_written_before_them(
    acme: TenantFixture,
) -> None:
    import importlib

    backfill = importlib.import_module("contextplatform.routes.migrations.0010_replay_spend")
    provider = {"input": 900, "output": 40, "cached_input": 300, "cache_write": 12}
    old = [
        record(tokens={"provider": provider, "deployment": "gpt", "answered_by": "gpt-backup"}),
        record(tokens={"provider": {"input": 5, "output": 1}, "deployment": "claude"}),
        record(tokens={"before": 10, "after": 8}),  # no usage came back: left as it is
    ]
    with schema_context(acme.schema):
        ReplayRecord.objects.bulk_create(old)
        with connection.cursor() as cursor:
            cursor.execute(backfill.BACKFILL)
        rows = {row.pk: row for row in ReplayRecord.objects.filter(pk__in=[r.pk for r in old])}
    connection.set_schema_to_public()
    first, second, untouched = (rows[r.pk] for r in old)
    assert (first.input_tokens, first.output_tokens) == (900, 40)
    assert (first.cached_input_tokens, first.cache_write_tokens) == (300, 12)
    assert first.deployment == "gpt-backup" and first.cost_usd is None
    assert (second.input_tokens, second.cached_input_tokens, second.deployment) == (5, 0, "claude")
    assert (untouched.input_tokens, untouched.deployment) == (0, "")
