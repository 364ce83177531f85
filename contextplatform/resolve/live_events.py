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
    from contextplatform.resolve.packing import PackDecision
    from sources.fetch import SourceOutcome

logger = logging.getLogger("contextplatform.live")


def event_frame(
    *,
    source: str,
    type: str,
    status: str,
    items: int,
    kept: int,
    ms: float,
    route: str,
    at: float,
    error: str | None,
) -> dict[str, Any]:
    """One source outcome as the dashboards read it (the stream's and the page's history alike);
    ``error`` says why a source failed (None when ok)."""
    return {
        "source": source,
        "type": type,
        "status": status,
        "items": items,
        "kept": kept,
        "ms": round(ms, 2),
        "route": route,
        "at": round(at, 3),
        "error": error,
    }


def source_events(
    route: str, outcomes: Sequence[SourceOutcome], decisions: Iterable[PackDecision]
) -> list[dict[str, Any]]:
    kept = Counter(d.item.source for d in decisions if d.kept)
    now = time.time()
    return [
        event_frame(
            source=o.name,
            type=o.type,
            status=o.status,
            items=len(o.items),
            kept=kept.get(o.name, 0),
            ms=o.ms,
            route=route,
            at=now,
            error=o.error,
        )
        for o in outcomes
    ]


def recorded_source_events(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The source outcomes replay records kept, in the same frames, marked ``"history": true``."""
    return [
        {
            **event_frame(
                source=source.get("name") or "?",
                type=source.get("type") or "",
                status=source.get("status") or "",
                items=source.get("items") or 0,
                kept=source.get("kept") or 0,
                ms=source.get("ms") or 0,
                route=record.route,
                at=record.created_at.timestamp(),
                error=source.get("error"),
            ),
            "history": True,
        }
        for record in records
        for source in record.sources or []
    ]


def call_frame(
    *,
    route: str,
    deployment: str,
    status: str,
    ms: float,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int,
    cost_usd: float | None,
    at: float,
) -> dict[str, Any]:
    """One gateway call as the dashboards read it (``"kind": "call"``, beside the sources'
    frames): its status (``core.metrics.GATEWAY_STATUSES``), the deployment that answered, the
    whole call's time, its tokens and cost (None: unpriced)."""
    return {
        "kind": "call",
        "route": route,
        "deployment": deployment,
        "status": status,
        "ms": round(ms, 2),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_input_tokens": cached_input_tokens,
        "cost_usd": cost_usd,
        "at": round(at, 3),
    }


def recorded_status(record: Any) -> str:
    """A recorded gateway call's status, as the live frame of the call said it."""
    tokens = record.tokens or {}
    attempts = tokens.get("attempts") or []
    if not attempts:
        return "refused"
    last = attempts[-1] if isinstance(attempts[-1], dict) else {}
    if last.get("outcome") == "answered":
        return (
            "ok" if record.response_received_at is not None or record.input_tokens else "incomplete"
        )
    return "rejected" if last.get("outcome") == "rejected" else "failed"


def recorded_call_events(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The gateway calls among replay records (those with a ``call_ms``), in the call frames,
    marked ``"history": true``."""
    return [
        {
            **call_frame(
                route=record.route,
                deployment=record.deployment,
                status=recorded_status(record),
                ms=record.call_ms,
                input_tokens=record.input_tokens,
                output_tokens=record.output_tokens,
                cached_input_tokens=record.cached_input_tokens,
                cost_usd=record.cost_usd,
                at=record.created_at.timestamp(),
            ),
            "history": True,
        }
        for record in records
        if record.call_ms is not None
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
