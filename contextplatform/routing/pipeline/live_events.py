"""Each resolve's source outcomes as live events for the tenant's dashboards (never raises)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from contextplatform.core.live_events import EVENT_TYPE, metrics_group, publish
from contextplatform.core.metrics import LIVE_EVENTS

if TYPE_CHECKING:
    from contextplatform.routing.pipeline.packing import PackDecision
    from sources.fetch import SourceOutcome

logger = logging.getLogger("contextplatform.live")


def source_events(
    route: str, outcomes: Sequence[SourceOutcome], decisions: Iterable[PackDecision]
) -> list[dict[str, Any]]:
    kept = Counter(d.item.source for d in decisions if d.kept)
    now = round(time.time(), 3)
    return [
        {
            "source": o.name,
            "type": o.type,
            "status": o.status,
            "items": len(o.items),
            "kept": kept.get(o.name, 0),
            "ms": round(o.ms, 2),
            "route": route,
            "at": now,
            "error": o.error,  # why a source failed, for the dashboard to say (None when ok)
        }
        for o in outcomes
    ]


def publish_source_events(
    schema: str,
    route: str,
    outcomes: Sequence[SourceOutcome],
    decisions: Iterable[PackDecision],
) -> None:
    """One event per source outcome to the tenant's dashboards; never raises."""
    if not outcomes:
        return
    try:
        events = source_events(route, outcomes, decisions)
        publish(metrics_group(schema), {"type": EVENT_TYPE, "events": events})
    except Exception:
        LIVE_EVENTS.labels("failed").inc()
        logger.warning("live_publish_failed", extra={"route": route}, exc_info=True)
