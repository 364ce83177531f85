"""HTTP endpoints of replay records: browse newest first, read one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import invalid_request, not_found
from contextplatform.core.views import ApiView
from contextplatform.replay import selectors
from contextplatform.replay.feedback import feedback_representation
from contextplatform.replay.models import Feedback, ReplayRecord
from contextplatform.replay.usage_records import usage_of_record


def replay_summary(record: ReplayRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "route": record.route,
        "variant": record.variant or "main",
        "user": record.user_id or None,
        "session": record.session_key or None,
        "status": record.status,
        "format": record.format,
        "created_at": record.created_at.isoformat(),
        "ms": record.duration_ms,
        "call_ms": record.call_ms,
        "sources": record.sources,
        "tokens": record.tokens,
        "error": record.error,
        "deployment": record.deployment or None,
        "key_id": record.key_id,
        "usage": usage_of_record(record),
        "cost_usd": record.cost_usd,
        "cost_breakdown": (record.tokens or {}).get("cost"),
    }


def replay_detail(record: ReplayRecord) -> dict[str, Any]:
    return {
        **replay_summary(record),
        "items": record.items,
        "budget": record.budget,
        "compression": record.compression,
        "tool_calls": record.tool_calls,
        "request": record.request_body,
        "rewritten_request": record.rewritten_body,
        "response_received_at": record.response_received_at.isoformat()
        if record.response_received_at
        else None,
        "response": record.response_body,
        "feedback": feedback_of(record),
    }


def feedback_of(record: ReplayRecord) -> dict[str, Any] | None:
    """The application's feedback on the record (``POST /resolve/{id}/feedback``), if any."""
    feedback = Feedback.objects.filter(record_id=record.id).first()
    return feedback_representation(feedback) if feedback is not None else None


def parse_time(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise invalid_request(
            f"{name}: expected an ISO 8601 time such as 2026-11-30T12:00:00Z", name
        ) from None
    if parsed.tzinfo is None:
        raise invalid_request(f"{name}: include a time zone (e.g. Z)", name)
    return parsed


class ReplayListView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(
        parameters=[
            OpenApiParameter(name, str, required=False)
            for name in ("route", "user", "status", "since", "until", "cursor", "limit")
        ],
        responses={200: dict},
        summary="Browse replay records, newest first",
    )
    def get(self, request: Request) -> Response:
        query = request.query_params
        status_filter = query.get("status") or None
        if status_filter and status_filter not in {"ok", "partial", "refused"}:
            raise invalid_request("status: must be one of ok, partial, refused", "status")
        limit = self.query_int(request, "limit", default=50, high=500)
        page = selectors.replay_page(
            route=query.get("route") or None,
            user=query.get("user") or None,
            status=status_filter,
            since=parse_time(query.get("since"), "since"),
            until=parse_time(query.get("until"), "until"),
            cursor=query.get("cursor") or None,
            limit=limit,
        )
        return Response(
            {"data": [replay_summary(r) for r in page.records], "next_cursor": page.next_cursor}
        )


class ReplayDetailView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(responses={200: dict}, summary="One replay record")
    def get(self, request: Request, record_id: str) -> Response:
        record = selectors.replay_record(record_id)
        if record is None:
            raise not_found(f"no replay record {record_id!r}")
        return Response(replay_detail(record))
