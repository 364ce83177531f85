"""The spend page of a tenant's admin site: cost per day stacked by route or deployment, and the
period's spend per route, deployment, API key and user (``replay.spend_selectors``, the sums
``GET /api/v1/spend`` gives)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from contextplatform.replay.spend_selectors import GroupBy, daily_spend, key_names, spend
from contextplatform.replay.writer import flush_current_tenant

PERIODS = {"1": "last day", "7": "last 7 days", "30": "last 30 days", "90": "last 90 days"}
DEFAULT_PERIOD = "30"
STACKS = ("route", "deployment")
TABLES = (("route", "Route"), ("deployment", "Deployment"), ("key", "API key"), ("user", "User"))


def chosen(value: str | None, allowed: Any, default: str) -> str:
    return value if value in allowed else default


def spend_page(request: HttpRequest) -> TemplateResponse:
    period = chosen(request.GET.get("days"), PERIODS, DEFAULT_PERIOD)
    stack = chosen(request.GET.get("stack"), STACKS, "route")
    flush_current_tenant()  # the records this process has accepted but not yet written
    until = datetime.now(UTC)
    since = until - timedelta(days=int(period))
    tables = []
    for group_by, title in TABLES:
        rows = [row.as_dict() for row in spend(cast(GroupBy, group_by), since, until)]
        if group_by == "key":
            names = key_names([row["group"] for row in rows if row["group"] is not None])
            for row in rows:
                row["label"] = names.get(row["group"], "(deleted key)") if row["group"] else "-"
        else:
            for row in rows:
                row["label"] = row["group"] if row["group"] is not None else "-"
        tables.append({"group_by": group_by, "title": title, "rows": rows})
    totals = tables[0]["rows"]
    context = {
        **admin.site.each_context(request),
        "title": "Spend",
        "periods": PERIODS,
        "period": period,
        "stacks": STACKS,
        "stack": stack,
        "since": since,
        "until": until,
        "daily": {
            "since": since.date().isoformat(),
            "until": until.date().isoformat(),
            "rows": daily_spend(cast(GroupBy, stack), since, until),
        },
        "tables": tables,
        "total_cost": round(sum(row["cost_usd"] for row in totals), 6),
        "total_requests": sum(row["requests"] for row in totals),
    }
    return TemplateResponse(request, "dashboard/spend.html", context)


# Any active staff user of the tenant (the admin's login page otherwise); never cached.
spend_page_view = admin.site.admin_view(spend_page)
