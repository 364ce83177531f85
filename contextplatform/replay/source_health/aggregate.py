"""Written with each batch of replay records, in the same transaction: each source's outcomes
added to its minute's counts, and its run of empty answers moved on.

A batch's records are taken in time order; batches of several processes interleave as they
commit, which can misplace a record or two in a run at its edges (the alert needs dozens).
One upsert per table and batch, rows in a fixed order (so that two processes writing the same
minutes wait for each other instead of deadlocking). Records replayed from a dead process's
spool are not counted (their insert cannot tell which were already there).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from django.db import connection

from contextplatform.replay.source_health.models import SourceHealthMinute, SourceHealthStreak
from contextplatform.replay.source_health.rules import OUTCOMES, Counts, latency_bucket

Pair = tuple[str, str]  # (route, source)


class Recorded(Protocol):
    """What is read of a ``ReplayRecord``."""

    id: str
    route: str
    created_at: datetime
    sources: Any


MINUTES_SQL = f"""
INSERT INTO {SourceHealthMinute._meta.db_table} AS b
    (route, source, minute, ok, empty, failed, timeout, kept, latency, max_ms)
VALUES {{values}}
ON CONFLICT (route, source, minute) DO UPDATE SET
    ok = b.ok + EXCLUDED.ok,
    empty = b.empty + EXCLUDED.empty,
    failed = b.failed + EXCLUDED.failed,
    timeout = b.timeout + EXCLUDED.timeout,
    kept = b.kept + EXCLUDED.kept,
    latency = ARRAY(
        SELECT x + y FROM unnest(b.latency, EXCLUDED.latency) WITH ORDINALITY AS t(x, y, i)
        ORDER BY i
    ),
    max_ms = GREATEST(b.max_ms, EXCLUDED.max_ms)
"""

STREAKS_SQL = f"""
INSERT INTO {SourceHealthStreak._meta.db_table} AS s
    (route, source, empty_streak, last_hit_at, updated_at)
VALUES {{values}}
ON CONFLICT (route, source) DO UPDATE SET
    empty_streak = CASE WHEN EXCLUDED.last_hit_at IS NULL
        THEN s.empty_streak + EXCLUDED.empty_streak ELSE EXCLUDED.empty_streak END,
    last_hit_at = GREATEST(s.last_hit_at, EXCLUDED.last_hit_at),
    updated_at = GREATEST(s.updated_at, EXCLUDED.updated_at)
"""


class Streak:
    """A batch's effect on one source's run: empties after the batch's last hit (or all of them,
    added to the stored run, when the batch has no hit)."""

    def __init__(self) -> None:
        self.empties = 0
        self.last_hit_at: datetime | None = None
        self.updated_at: datetime | None = None

    def see(self, status: str, at: datetime) -> None:
        if status == "ok":
            self.empties = 0
            self.last_hit_at = at
        elif status == "empty":
            self.empties += 1
        self.updated_at = at if self.updated_at is None else max(self.updated_at, at)


def tally(
    records: Iterable[Recorded],
) -> tuple[dict[tuple[str, str, datetime], Counts], dict[Pair, Streak]]:
    minutes: dict[tuple[str, str, datetime], Counts] = {}
    streaks: dict[Pair, Streak] = {}
    for record in sorted(records, key=lambda r: (r.created_at, r.id)):
        minute = record.created_at.replace(second=0, microsecond=0)
        for source in record.sources or []:
            status = source.get("status")
            if status not in OUTCOMES:
                continue  # skipped: the source was not asked
            name = str(source.get("name") or "?")
            counts = minutes.setdefault((record.route, name, minute), Counts())
            setattr(counts, status, getattr(counts, status) + 1)
            counts.kept += int(source.get("kept") or 0)
            ms = float(source.get("ms") or 0.0)
            counts.latency[latency_bucket(ms)] += 1
            counts.max_ms = max(counts.max_ms, ms)
            streaks.setdefault((record.route, name), Streak()).see(status, record.created_at)
    return minutes, streaks


def record_outcomes(records: Iterable[Recorded]) -> set[Pair]:
    """Add the records' source outcomes to their minutes and runs (in the connection's schema
    and transaction); the (route, source) pairs touched."""
    minutes, streaks = tally(records)
    if not minutes:
        return set()
    minute_rows: list[Any] = []
    for (route, source, minute), c in sorted(minutes.items()):
        minute_rows.append(
            (route, source, minute, c.ok, c.empty, c.failed, c.timeout, c.kept, c.latency, c.max_ms)
        )
    streak_rows = [
        (route, source, s.empties, s.last_hit_at, s.updated_at)
        for (route, source), s in sorted(streaks.items())
    ]
    with connection.cursor() as cursor:
        cursor.execute(*values_statement(MINUTES_SQL, minute_rows))
        cursor.execute(*values_statement(STREAKS_SQL, streak_rows))
    return set(streaks)


def values_statement(template: str, rows: list[Any]) -> tuple[str, list[Any]]:
    width = len(rows[0])
    one = "(" + ", ".join(["%s"] * width) + ")"
    return template.format(values=", ".join([one] * len(rows))), [v for row in rows for v in row]
