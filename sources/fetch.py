"""Fetch every source of a route concurrently, each under its own deadline.

A source's ``timeout_ms`` is a deadline on its whole fetch: the clock starts here
(``sources.fetch_deadline``), everything the source does inside takes its own bounds from what is
left of it, and a fetch cut by a bound of its own (a backend's ``timeout_ms``, a connector's)
raises a ``TimeoutError`` and is reported ``timeout`` like one cut here, not ``failed``.

A fetch cut here is cancelled and its outcome given at once: the resolve does not wait for it to
finish unwinding (a client closing, a cancelled operation's clean-up), which goes on in the
background, the task referenced until it ends and anything it raises then logged
(``context_source_unwind_failed``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import AsyncToSync, async_to_sync

from contextplatform.core import metrics
from contextplatform.core.estimation import TokenEstimator, default_estimator
from sources import fetch_deadline
from sources.base import (
    ContextItem,
    ContextRequest,
    ContextSource,
    OnFailure,
    SourceFailed,
    SourceResult,
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
    source: ContextSource,
    request: ContextRequest,
    estimator: TokenEstimator,
    started_at: float | None = None,
) -> SourceOutcome:
    """One source's outcome, logged and counted (``context_source_*`` metrics) here, once.
    ``started_at``: when its fetch began, if before this call (its deadline runs from there)."""
    token = metrics.current_source_type.set(source.type)
    try:
        outcome = await fetch_one(source, request, estimator, started_at)
    finally:
        metrics.current_source_type.reset(token)
    if request.observed:
        metrics.observe_source(request.route, outcome)
    return outcome


def new_outcome(source: ContextSource) -> SourceOutcome:
    """The source's line in the report before its fetch: ``skipped`` until it says otherwise."""
    return SourceOutcome(
        name=source.name,
        type=source.type,
        priority=source.priority,
        on_failure=source.on_failure,
        status="skipped",
    )


async def fetch_one(
    source: ContextSource,
    request: ContextRequest,
    estimator: TokenEstimator,
    started_at: float | None = None,
) -> SourceOutcome:
    outcome = new_outcome(source)
    if not source.settings.enabled:
        return outcome
    now = time.perf_counter()
    outcome.started_at = now if started_at is None else started_at
    seconds = source.timeout_seconds - (now - outcome.started_at)
    if seconds <= 0:  # spent before this call (asking the source on the request's thread)
        record_failure(outcome, DeadlinePassed(), source, time.monotonic())
        return finished(outcome, request, estimator)
    with fetch_deadline.running(seconds) as deadline:
        # The fetch's task copies the context: everything it starts sees the deadline.
        fetching = asyncio.ensure_future(source.fetch(request))
    try:
        result = await within_deadline(fetching, seconds, source, request)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # a source's failure is recorded, never raised
        record_failure(outcome, error, source, deadline)
    else:
        record_result(outcome, result)
    return finished(outcome, request, estimator)


def record_result(outcome: SourceOutcome, result: SourceResult) -> None:
    outcome.items = result.items
    outcome.status = "ok" if result.items else "empty"
    outcome.candidates = result.trace
    outcome.notes = result.notes


def record_failure(
    outcome: SourceOutcome, error: Exception, source: ContextSource, deadline: float
) -> None:
    if isinstance(error, DeadlinePassed):  # cut at the deadline
        outcome.status = "timeout"
        outcome.error = f"timed out after {source.timeout_seconds * 1000:.0f} ms"
        outcome.notes = source.notes_on_timeout()
    elif isinstance(error, TimeoutError):  # a shorter bound of the source's own fired first
        outcome.status = "timeout"
        outcome.error = timeout_text(error)
    elif isinstance(error, SourceFailed):
        outcome.status = failed_status(error.error, deadline)
        outcome.error = failure_text(error.error)
        outcome.notes = error.notes
    else:
        outcome.status = failed_status(error, deadline)
        outcome.error = failure_text(error)


def finished(
    outcome: SourceOutcome, request: ContextRequest, estimator: TokenEstimator
) -> SourceOutcome:
    """The outcome with its clock stopped, its items' tokens counted, logged."""
    outcome.ended_at = time.perf_counter()
    outcome.ms = round((outcome.ended_at - outcome.started_at) * 1000, 3)
    for item in outcome.items:  # after the clock stops: estimation is our cost, not the source's
        if not item.tokens:
            item.tokens = estimator.count(item.content)
            item.estimator = estimator.name
    log_outcome(outcome, request)
    return outcome


class DeadlinePassed(Exception):
    """The source's deadline came before its fetch ended (a fetch on the loop is cancelled
    meanwhile; one done on the request's thread is reported timed out when it ends)."""


# Cancelled fetches still unwinding: referenced until done (the loop keeps only weak references).
_UNWINDING: set[asyncio.Task[Any]] = set()


async def within_deadline(
    fetching: asyncio.Task[SourceResult],
    seconds: float,
    source: ContextSource,
    request: ContextRequest,
) -> SourceResult:
    """The fetch's result, or ``DeadlinePassed`` once ``seconds`` have passed.

    Unlike ``asyncio.wait_for``, the resolve does not wait for a cut fetch to finish unwinding
    (closing its connections, a thread's statement being cancelled, a client's own clean-up): the
    fetch is cancelled and left to end in the background, referenced until it does, whatever it
    raises then logged, never raised. The same when the resolve itself is cancelled.
    """
    try:
        await asyncio.wait((fetching,), timeout=seconds)
    except asyncio.CancelledError:
        unwind_in_background(fetching, source, request)
        raise
    if not fetching.done():
        unwind_in_background(fetching, source, request)
        raise DeadlinePassed
    return fetching.result()


def unwind_in_background(
    fetching: asyncio.Task[SourceResult], source: ContextSource, request: ContextRequest
) -> None:
    fetching.cancel()
    _UNWINDING.add(fetching)

    def unwound(task: asyncio.Task[SourceResult]) -> None:
        _UNWINDING.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved: no "exception was never retrieved" at exit
        if error is not None:
            logger.warning(
                "context_source_unwind_failed",
                extra={
                    "request_id": request.request_id,
                    "tenant": request.tenant,
                    "route": request.route,
                    "source": source.name,
                    "err": failure_text(error),
                },
            )

    fetching.add_done_callback(unwound)


def unwinding() -> int:
    """How many cut fetches are still unwinding (in this process, on any loop)."""
    return len(_UNWINDING)


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
        # At DEBUG: a success is in the replay record and the per-source metrics already, and at
        # INFO its line cost a resolve more CPU than the source's own cache hit.
        logger.debug("context_source_ok", extra={**fields, "status": outcome.status})


async def fetch_all(
    sources: list[ContextSource],
    request: ContextRequest,
    estimator: TokenEstimator | None = None,
    started_at: Sequence[float] | None = None,
) -> list[SourceOutcome]:
    """All sources at once; the result keeps the sources' order. ``started_at``, one per source:
    when each fetch began, when that was before this call (each deadline runs from there).

    A fetch cut at its deadline unwinds in the background: on a loop that outlives the call (a
    server's), the outcomes are returned at once. A loop that ends with the call (asgiref's own,
    made for a sync caller outside a server: tests, commands, benches) would cancel every task
    still running as it shuts down, a client's own clean-up tasks included, so there the cut
    fetches are waited for first.
    """
    chosen = estimator or default_estimator()
    began: Sequence[float | None] = started_at or [None] * len(sources)
    outcomes = list(
        await asyncio.gather(
            *(fetch_source(s, request, chosen, at) for s, at in zip(sources, began, strict=True))
        )
    )
    if loop_ends_with_the_call():
        await settle_unwinding()
    return outcomes


def fetch_all_from_thread(
    sources: list[ContextSource],
    request: ContextRequest,
    estimator: TokenEstimator | None = None,
) -> list[SourceOutcome]:
    """``fetch_all`` for a caller on the request's thread (the resolve, a preview, a search tool
    call): the sources that have their result at hand (``ContextSource.fetch_at_once``) answer
    here, in order, and the others are fetched together on the event loop, the one trip to it and
    back made only when some source needs it. The result keeps the sources' order.

    The trade-off: the sources answered here run before the others start, instead of beside them;
    each of them is a fixed text, a cached retrieval or a single read of the tenant's database,
    which ran one after another on this thread before as well.
    """
    chosen = estimator or default_estimator()
    at_once: list[SourceOutcome | None] = []
    waiting: list[ContextSource] = []
    asked_at: list[float] = []  # a source sent on to the loop keeps the time it was asked here
    for source in sources:
        asked_at.append(time.perf_counter())
        at_once.append(fetched_at_once(source, request, chosen))
        if at_once[-1] is None:
            waiting.append(source)
        else:
            asked_at.pop()
    if not waiting:
        return [outcome for outcome in at_once if outcome is not None]
    from_loop = iter(async_to_sync(fetch_all)(waiting, request, chosen, asked_at))
    return [outcome if outcome is not None else next(from_loop) for outcome in at_once]


def fetched_at_once(
    source: ContextSource, request: ContextRequest, estimator: TokenEstimator
) -> SourceOutcome | None:
    """The source's outcome when it answers on this thread (``fetch_at_once``), logged and
    counted like a fetch on the loop; ``None`` when it must be fetched there. A fetch that ends
    past its deadline is reported timed out, with its time, as one cut there would be."""
    outcome = new_outcome(source)
    if source.settings.enabled:
        outcome.started_at = time.perf_counter()
        seconds = source.timeout_seconds
        token = metrics.current_source_type.set(source.type)
        try:
            with fetch_deadline.running(seconds) as deadline:
                result = source.fetch_at_once(request)
            if result is None:
                return None
            if time.perf_counter() - outcome.started_at >= seconds:
                raise DeadlinePassed
        except Exception as error:  # a source's failure is recorded, never raised
            record_failure(outcome, error, source, deadline)
        else:
            record_result(outcome, result)
        finally:
            metrics.current_source_type.reset(token)
        finished(outcome, request, estimator)
    if request.observed:
        metrics.observe_source(request.route, outcome)
    return outcome


def loop_ends_with_the_call() -> bool:
    """True on the loop asgiref's ``async_to_sync`` made for this one call (no server loop to run
    it on): asgiref registers that loop in ``loop_thread_executors`` while the call runs."""
    return asyncio.get_running_loop() in AsyncToSync.loop_thread_executors


async def settle_unwinding() -> None:
    """Until this loop's cut fetches have finished unwinding."""
    loop = asyncio.get_running_loop()
    # a copy first: other threads' loops add and discard theirs meanwhile
    pending = [task for task in tuple(_UNWINDING) if task.get_loop() is loop]
    if pending:
        await asyncio.wait(pending)
