"""Fetch every source of a route concurrently, each under its own timeout."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from contextplatform.core import metrics
from contextplatform.core.estimation import TokenEstimator, default_estimator
from sources.base import (
    ContextItem,
    ContextRequest,
    ContextSource,
    OnFailure,
    SourceFailed,
    SourceStatus,
)

logger = logging.getLogger("contextplatform.sources")


@dataclass
class SourceOutcome:
    name: str
    type: str
    priority: int
    on_failure: OnFailure
    status: SourceStatus
    items: list[ContextItem] = field(default_factory=list)
    error: str | None = None
    ms: float = 0.0
    started_at: float = 0.0
    ended_at: float = 0.0
    candidates: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in {"failed", "timeout"}


async def fetch_source(
    source: ContextSource, request: ContextRequest, estimator: TokenEstimator
) -> SourceOutcome:
    """One source's outcome, logged and counted (``context_source_*`` metrics) here, once."""
    token = metrics.current_source_type.set(source.type)
    try:
        outcome = await fetch_one(source, request, estimator)
    finally:
        metrics.current_source_type.reset(token)
    metrics.observe_source(request.route, outcome)
    return outcome


async def fetch_one(
    source: ContextSource, request: ContextRequest, estimator: TokenEstimator
) -> SourceOutcome:
    outcome = SourceOutcome(
        name=source.name,
        type=source.type,
        priority=source.priority,
        on_failure=source.on_failure,
        status="skipped",
    )
    if not source.settings.enabled:
        return outcome
    outcome.started_at = time.perf_counter()
    try:
        result = await asyncio.wait_for(source.fetch(request), timeout=source.timeout_seconds)
    except TimeoutError:
        outcome.status = "timeout"
        outcome.error = f"timed out after {source.timeout_seconds * 1000:.0f} ms"
        outcome.notes = source.notes_on_timeout()
    except asyncio.CancelledError:
        raise
    except SourceFailed as failure:
        outcome.status = "failed"
        outcome.error = failure_text(failure.error)
        outcome.notes = failure.notes
    except Exception as error:  # a source's failure is recorded, never raised
        outcome.status = "failed"
        outcome.error = failure_text(error)
    else:
        outcome.items = result.items
        outcome.status = "ok" if result.items else "empty"
        outcome.candidates = result.trace
        outcome.notes = result.notes
    outcome.ended_at = time.perf_counter()
    outcome.ms = round((outcome.ended_at - outcome.started_at) * 1000, 3)
    for item in outcome.items:  # after the clock stops: estimation is our cost, not the source's
        if not item.tokens:
            item.tokens = estimator.count(item.content)
            item.estimator = estimator.name
    log_outcome(outcome, request)
    return outcome


def failure_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def log_outcome(outcome: SourceOutcome, request: ContextRequest) -> None:
    fields = {
        "request_id": request.request_id,
        "tenant": request.tenant,
        "route": request.route,
        "source": outcome.name,
        "items": len(outcome.items),
        "ms": outcome.ms,
    }
    if outcome.failed:
        level = logging.WARNING if outcome.on_failure in {"warn", "block"} else logging.INFO
        logger.log(
            level,
            "context_source_failed",
            extra={**fields, "err": outcome.error, "status": outcome.status},
        )
    else:
        logger.info("context_source_ok", extra={**fields, "status": outcome.status})


async def fetch_all(
    sources: list[ContextSource],
    request: ContextRequest,
    estimator: TokenEstimator | None = None,
) -> list[SourceOutcome]:
    """All sources at once; the result keeps the sources' order."""
    chosen = estimator or default_estimator()
    return list(await asyncio.gather(*(fetch_source(s, request, chosen) for s in sources)))
