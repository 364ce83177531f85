"""Spend over the replay records of the tenant whose schema the connection is in: requests,
tokens and cost summed in SQL per route, API key, deployment, user or day (the record's columns
``input_tokens`` … ``cost_usd``, set when the call's usage came back).

Read from the replica when there is one (``lag_tolerant``): a sum over a period may miss the last
moment's calls without anyone noticing, and it is the heaviest read of a dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from django.db import connection
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce, TruncDate

from contextplatform.database_routing import lag_tolerant
from contextplatform.replay.models import ReplayRecord
from tenants.models import ApiKey

GroupBy = Literal["route", "key", "deployment", "user", "day"]
GROUP_BYS: tuple[GroupBy, ...] = ("route", "key", "deployment", "user", "day")
COLUMN = {"route": "route", "key": "key_id", "deployment": "deployment", "user": "user_id"}


@dataclass(frozen=True)
class SpendRow:
    group: Any  # the route, the key's id, the deployment, the user (None: none), or the day
    requests: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    unpriced_requests: int  # calls that reported usage at a deployment with no price

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cost_usd": round(self.cost_usd, 9),
            "unpriced_requests": self.unpriced_requests,
        }


def spend(group_by: GroupBy, since: datetime, until: datetime) -> list[SpendRow]:
    """One row per group of the records created in [since, until): by cost, the costliest first
    (by day: in date order)."""
    records = ReplayRecord.objects.using(lag_tolerant()).filter(
        created_at__gte=since, created_at__lt=until
    )
    if group_by == "day":
        grouped = records.annotate(group=TruncDate("created_at", tzinfo=UTC)).values("group")
    else:
        grouped = records.annotate(group=F(COLUMN[group_by])).values("group")
    rows = grouped.annotate(
        requests=Count("id"),
        input=Coalesce(Sum("input_tokens"), 0),
        output=Coalesce(Sum("output_tokens"), 0),
        cached=Coalesce(Sum("cached_input_tokens"), 0),
        cost=Coalesce(Sum("cost_usd"), 0.0),
        unpriced=Count("id", filter=Q(cost_usd__isnull=True) & Q(input_tokens__gt=0)),
    )
    ordered = (
        rows.order_by("group")
        if group_by == "day"
        else rows.order_by(F("cost").desc(), F("requests").desc(), "group")
    )
    return [
        SpendRow(
            group=present(group_by, row["group"]),
            requests=row["requests"],
            input_tokens=row["input"],
            output_tokens=row["output"],
            cached_input_tokens=row["cached"],
            cost_usd=float(row["cost"]),
            unpriced_requests=row["unpriced"],
        )
        for row in ordered
    ]


def daily_spend(stack_by: GroupBy, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Cost and requests per day and per ``stack_by`` group (route or deployment: a chart's
    stacks), in date order: ``{"day", "group", "requests", "cost_usd"}``."""
    rows = (
        ReplayRecord.objects.using(lag_tolerant())
        .filter(created_at__gte=since, created_at__lt=until)
        .annotate(day=TruncDate("created_at", tzinfo=UTC), group=F(COLUMN[stack_by]))
        .values("day", "group")
        .annotate(requests=Count("id"), cost=Coalesce(Sum("cost_usd"), 0.0))
        .order_by("day", "group")
    )
    return [
        {
            "day": row["day"].isoformat(),
            "group": present(stack_by, row["group"]),
            "requests": row["requests"],
            "cost_usd": round(float(row["cost"]), 9),
        }
        for row in rows
    ]


def key_names(ids: list[int]) -> dict[int, str]:
    """The names of the tenant's API keys among ``ids`` (a key of another tenant never)."""
    tenant = getattr(connection, "tenant", None)
    if tenant is None or not ids:
        return {}
    found = (
        ApiKey.objects.using(lag_tolerant())
        .filter(tenant_id=tenant.pk, pk__in=ids)
        .values_list("pk", "name", "prefix")
    )
    return {pk: f"{name} ({prefix}…)" for pk, name, prefix in found}


def present(group_by: GroupBy, value: Any) -> Any:
    if group_by == "day":
        return value.isoformat() if value is not None else None
    return value if value not in ("", None) else None


__all__ = ["GROUP_BYS", "GroupBy", "SpendRow", "daily_spend", "key_names", "spend"]
