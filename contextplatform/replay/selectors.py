"""Reads of replay records (the tenant is the connection's schema)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from contextplatform.core.errors import invalid_request
from contextplatform.database_routing import lag_tolerant
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import flush_current_tenant


def latest_replay_records(limit: int) -> list[ReplayRecord]:
    """The tenant's newest replay records, newest first, with what the dashboard reads of them."""
    return list(
        ReplayRecord.objects.only("route", "created_at", "sources").order_by("-created_at", "-id")[
            :limit
        ]
    )


def replay_record(record_id: str) -> ReplayRecord | None:
    flush_current_tenant()
    return ReplayRecord.objects.filter(pk=record_id).first()


@dataclass(frozen=True)
class ReplayPage:
    records: list[ReplayRecord]
    next_cursor: str | None


def encode_cursor(record: ReplayRecord) -> str:
    raw = json.dumps([record.created_at.isoformat(), record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, record_id = json.loads(base64.urlsafe_b64decode(padded))
        return datetime.fromisoformat(created), str(record_id)
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise invalid_request("cursor: not a cursor this API returned", "cursor") from None


def replay_page(
    *,
    route: str | None = None,
    user: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> ReplayPage:
    """Newest first, keyset-paginated on (created_at, id). From the replica when there is one
    (``lag_tolerant``): a list may be a moment behind; a record read by its id is not."""
    flush_current_tenant()
    records = ReplayRecord.objects.using(lag_tolerant()).all()
    if route:
        records = records.filter(route=route)
    if user:
        records = records.filter(user_id=user)
    if status:
        records = records.filter(status=status)
    if since:
        records = records.filter(created_at__gte=since)
    if until:
        records = records.filter(created_at__lt=until)
    if cursor:
        created, record_id = decode_cursor(cursor)
        records = records.filter(
            Q(created_at__lt=created) | Q(created_at=created, id__lt=record_id)
        )
    page = list(records.order_by("-created_at", "-id")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    return ReplayPage(
        records=page, next_cursor=encode_cursor(page[-1]) if has_more and page else None
    )
