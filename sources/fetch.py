"""Fetch every source of a route concurrently, each under its own deadline.

A source's ``timeout_ms`` is a deadline on its whole fetch: the clock starts here
(``sources.fetch_deadline``), everything the source does inside takes its own bounds from what is
left of it, and a fetch cut by a bound of its own (a backend's ``timeout_ms``, a connector's)
raises a ``TimeoutError`` and is reported ``timeout`` like one cut here, not ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from contextplatform.core import metrics
from contextplatform.core.estimation import TokenEstimator, default_estimator
from sources import fetch_deadline
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
    seconds = source.timeout_seconds
    with fetch_deadline.running(seconds) as deadline:
        # The fetch's task copies the context: everything it starts sees the deadline.
        fetching = asyncio.ensure_future(source.fetch(request))
    try:
        result = await asyncio.wait_for(fetching, timeout=seconds)
    except TimeoutError as error:
        outcome.status = "timeout"
        if fetching.cancelled():  # cut here, at the deadline
            outcome.error = f"timed out after {seconds * 1000:.0f} ms"
            outcome.notes = source.notes_on_timeout()
        else:  # a shorter bound of the source's own fired first
            outcome.error = timeout_text(error)
    except asyncio.CancelledError:
        raise
    except SourceFailed as failure:
        outcome.status = failed_status(failure.error, deadline)
        outcome.error = failure_text(failure.error)
        outcome.notes = failure.notes
    except Exception as error:  # a source's failure is recorded, never raised
        outcome.status = failed_status(error, deadline)
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


def failed_status(error: BaseException, deadline: float) -> SourceStatus:
    """``timeout`` for a fetch cut by a bound of its own (a ``TimeoutError``) or failing once its
    deadline had passed (a database statement cancelled by the deadline's statement_timeout);
    ``failed`` otherwise."""
    if isinstance(error, TimeoutError) or time.monotonic() >= deadline:
        return "timeout"
    return "failed"


def timeout_text(error: BaseException) -> str:
    """A bound of the source's own fired: its message, or the plain words when it has none."""
    return failure_text(error) if str(error) else "timed out"


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
