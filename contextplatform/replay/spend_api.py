"""``GET /api/v1/spend``: requests, tokens and cost per route, API key, deployment, user or day,
over a period (by default the last 30 days)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import invalid_request
from contextplatform.core.views import ApiView
from contextplatform.replay.spend_selectors import GROUP_BYS, GroupBy, spend

DEFAULT_DAYS = 30
MAX_DAYS = 366


def bound(value: str | None, name: str, *, end: bool) -> datetime | None:
    """``since``/``until`` as given: an ISO date (a ``since`` day from its start, an ``until``
    day to its end, UTC) or an ISO datetime with its time zone."""
    if not value:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            start = datetime.combine(day, time.min, tzinfo=UTC)
            return start + timedelta(days=1) if end else start
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise invalid_request(f"{name}: include a time zone (e.g. Z)", name)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # not a date, or past either end of the calendar in UTC
        raise invalid_request(
            f"{name}: expected an ISO 8601 date (2026-11-30) or time (2026-11-30T12:00:00Z)",
            name,
        ) from None


def period(since_text: str | None, until_text: str | None) -> tuple[datetime, datetime]:
    until = bound(until_text, "until", end=True) or datetime.now(UTC)
    since = bound(since_text, "since", end=False) or until - timedelta(days=DEFAULT_DAYS)
    if since >= until:
        raise invalid_request("since: must be before until", "since")
    if until - since > timedelta(days=MAX_DAYS):
        raise invalid_request(f"since: the period may span at most {MAX_DAYS} days", "since")
    return since, until


class SpendView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(
        parameters=[
            OpenApiParameter("group_by", str, required=False, enum=list(GROUP_BYS)),
            OpenApiParameter("since", str, required=False),
            OpenApiParameter("until", str, required=False),
        ],
        responses={200: dict},
        summary="Requests, tokens and cost per route, key, deployment, user or day",
    )
    def get(self, request: Request) -> Response:
        query = request.query_params
        group_by = query.get("group_by") or "route"
        if group_by not in GROUP_BYS:
            raise invalid_request(f"group_by: must be one of {', '.join(GROUP_BYS)}", "group_by")
        since, until = period(query.get("since"), query.get("until"))
        rows = spend(cast(GroupBy, group_by), since, until)
        return Response(
            {
                "group_by": group_by,
                "since": since.isoformat(),
                "until": until.isoformat(),
                "rows": [row.as_dict() for row in rows],
            }
        )
