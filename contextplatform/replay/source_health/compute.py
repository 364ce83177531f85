"""Each source's health read from its minutes' counts (the connection's schema): the last hour,
the seven days before it as the baseline, and the alert (``rules.alert``).

Three grouped queries whatever the traffic: the window's minutes, the baseline's, the runs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.models import F, Max, Q, QuerySet, Sum
from django.db.models.expressions import Func
from django.utils import timezone

from contextplatform.replay.source_health.models import SourceHealthMinute, SourceHealthStreak
from contextplatform.replay.source_health.rules import (
    LATENCY_BOUNDS_MS,
    Counts,
    Thresholds,
    alert,
)

WINDOW_MINUTES = 60
BASELINE_DAYS = 7

Pair = tuple[str, str]


@dataclass(frozen=True)
class SourceHealth:
    route: str
    source: str
    window: Counts
    baseline: Counts
    empty_streak: int
    alert: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "source": self.source,
            "window_minutes": WINDOW_MINUTES,
            **self.window.summary(),
            "baseline": {"days": BASELINE_DAYS, **self.baseline.summary()},
            "empty_streak": self.empty_streak,
            "alert": self.alert,
        }


def thresholds() -> Thresholds:
    return Thresholds.from_settings(getattr(settings, "SOURCE_HEALTH_RULES", None))


def window_start(now: datetime) -> datetime:
    """The first minute of the window: the current minute and the 59 before it."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)


def summed(minutes: QuerySet[SourceHealthMinute]) -> dict[Pair, Counts]:
    sums: dict[str, Any] = {
        name: Sum(name) for name in ("ok", "empty", "failed", "timeout", "kept")
    }
    for index in range(len(LATENCY_BOUNDS_MS)):
        # PostgreSQL arrays count from 1
        sums[f"l{index}"] = Sum(Func(F("latency"), template=f"%(expressions)s[{index + 1}]"))
    rows = minutes.values("route", "source").annotate(top=Max("max_ms"), **sums)
    return {
        (row["route"], row["source"]): Counts(
            ok=row["ok"] or 0,
            empty=row["empty"] or 0,
            failed=row["failed"] or 0,
            timeout=row["timeout"] or 0,
            kept=row["kept"] or 0,
            latency=[int(row[f"l{i}"] or 0) for i in range(len(LATENCY_BOUNDS_MS))],
            max_ms=float(row["top"] or 0.0),
        )
        for row in rows.order_by()
    }


def source_health(
    *,
    route: str | None = None,
    pairs: Collection[Pair] | None = None,
    now: datetime | None = None,
    baseline: dict[Pair, Counts] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[SourceHealth]:
    """The health of every source with outcomes in the last hour or the week before (of one
    route, or of the given pairs), by route and source. ``baseline``: counts already known.
    ``using``: the database alias read (the replica for a reader that tolerates lag)."""
    start = window_start(now or timezone.now())
    since = start - timedelta(days=BASELINE_DAYS)
    minutes = SourceHealthMinute.objects.using(using).all()
    streaks = SourceHealthStreak.objects.using(using).all()
    if route is not None:
        minutes, streaks = minutes.filter(route=route), streaks.filter(route=route)
    if pairs is not None:
        which = Q(pk__in=[])
        for pair_route, pair_source in pairs:
            which |= Q(route=pair_route, source=pair_source)
        minutes, streaks = minutes.filter(which), streaks.filter(which)
    window = summed(minutes.filter(minute__gte=start))
    if baseline is None:
        baseline = summed(minutes.filter(minute__gte=since, minute__lt=start))
    runs = dict(((r, s), n) for r, s, n in streaks.values_list("route", "source", "empty_streak"))
    rules = thresholds()
    found = sorted(set(window) | {pair for pair, counts in baseline.items() if counts.requests})
    return [
        SourceHealth(
            route=pair[0],
            source=pair[1],
            window=window.get(pair, Counts()),
            baseline=baseline.get(pair, Counts()),
            empty_streak=runs.get(pair, 0),
            alert=alert(
                window.get(pair, Counts()), baseline.get(pair, Counts()), runs.get(pair, 0), rules
            ),
        )
        for pair in found
    ]


def baseline_counts(pairs: Collection[Pair], now: datetime | None = None) -> dict[Pair, Counts]:
    start = window_start(now or timezone.now())
    which = Q(pk__in=[])
    for pair_route, pair_source in pairs:
        which |= Q(route=pair_route, source=pair_source)
    return summed(
        SourceHealthMinute.objects.filter(
            which, minute__gte=start - timedelta(days=BASELINE_DAYS), minute__lt=start
        )
    )
