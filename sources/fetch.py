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
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import AsyncToSync

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
    # A source read ahead on the request's thread began with its read.
    outcome.started_at = source.read_started_at or time.perf_counter()
    seconds = source.timeout_seconds
    with fetch_deadline.running(seconds) as deadline:
        # The fetch's task copies the context: everything it starts sees the deadline.
        fetching = asyncio.ensure_future(source.fetch(request))
    try:
        result = await within_deadline(fetching, seconds, source, request)
    except DeadlinePassed:  # cut here, at the deadline
        outcome.status = "timeout"
        outcome.error = f"timed out after {seconds * 1000:.0f} ms"
        outcome.notes = source.notes_on_timeout()
    except TimeoutError as error:  # a shorter bound of the source's own fired first
        outcome.status = "timeout"
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


class DeadlinePassed(Exception):
    """The source's deadline came before its fetch ended (the fetch is cancelled meanwhile)."""


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
) -> list[SourceOutcome]:
    """All sources at once; the result keeps the sources' order.

    A fetch cut at its deadline unwinds in the background: on a loop that outlives the call (a
    server's), the outcomes are returned at once. A loop that ends with the call (asgiref's own,
    made for a sync caller outside a server: tests, commands, benches) would cancel every task
    still running as it shuts down, a client's own clean-up tasks included, so there the cut
    fetches are waited for first.
    """
    chosen = estimator or default_estimator()
    outcomes = list(await asyncio.gather(*(fetch_source(s, request, chosen) for s in sources)))
    if loop_ends_with_the_call():
        await settle_unwinding()
    return outcomes


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
