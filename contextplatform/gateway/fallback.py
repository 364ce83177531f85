"""Calls that survive a provider: a route's ``model.upstream`` may list deployments in fallback
order, and a call moves to the next one when a deployment gives no answer to pass on (a
connection error, a timeout, a 429 or a 5xx, before the first byte of the answer). A 4xx other
than 429 is the caller's to fix and passes through as it is.

A deployment that failed cools down (in this process) for the ``Retry-After`` it sent (seconds
or an HTTP date, bounded by ``GATEWAY_FALLBACK_MAX_COOLDOWN_S``), else for
``GATEWAY_FALLBACK_COOLDOWN_S``; a cooling deployment is tried after the others, the one whose
cool-down ends first leading. An answer ends its deployment's cool-down. Every attempt (the
deployment, how it ended, how long it took) goes into the replay record."""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from django.conf import settings

from contextplatform.core.metrics import GATEWAY_FALLBACKS
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.forward import UpstreamRejected, UpstreamUnavailable

logger = logging.getLogger("contextplatform.gateway")

DEFAULT_COOLDOWN_S = 30.0
DEFAULT_MAX_COOLDOWN_S = 600.0
RATE_LIMITED = 429

T = TypeVar("T")


def cooldown_s() -> float:
    return float(getattr(settings, "GATEWAY_FALLBACK_COOLDOWN_S", DEFAULT_COOLDOWN_S))


def max_cooldown_s() -> float:
    return float(getattr(settings, "GATEWAY_FALLBACK_MAX_COOLDOWN_S", DEFAULT_MAX_COOLDOWN_S))


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date; None when absent or
    unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


class Cooldowns:
    """Until when each deployment (per tenant schema and name) is left out, by the monotonic
    clock; shared by the threads and loops of this process."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def cool(self, key: tuple[str, str], seconds: float) -> None:
        if seconds <= 0:
            return
        until = time.monotonic() + min(seconds, max_cooldown_s())
        with self._lock:
            self._until[key] = max(self._until.get(key, 0.0), until)

    def clear(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._until.pop(key, None)

    def ends(self, key: tuple[str, str]) -> float | None:
        """When ``key``'s cool-down ends (monotonic), None when it is not cooling."""
        now = time.monotonic()
        with self._lock:
            until = self._until.get(key)
            if until is not None and until <= now:
                del self._until[key]
                return None
            return until


COOLDOWNS = Cooldowns()


def in_order(schema: str, upstreams: Sequence[Upstream]) -> list[Upstream]:
    """The deployments in the order to try them: those not cooling as listed, then the cooling
    ones, the one whose cool-down ends first leading."""
    ends = {upstream.name: COOLDOWNS.ends((schema, upstream.name)) for upstream in upstreams}
    ready = [upstream for upstream in upstreams if ends[upstream.name] is None]
    cooling = sorted(
        (upstream for upstream in upstreams if ends[upstream.name] is not None),
        key=lambda upstream: ends[upstream.name] or 0.0,
    )
    return ready + cooling


@dataclass(frozen=True)
class Attempt:
    """One deployment tried: how it ended (``answered``, ``rejected`` for a 4xx passed on,
    ``status``, ``timeout``, ``connection``), its HTTP status when it answered one."""

    deployment: str
    outcome: str
    ms: int
    status: int | None = None

    def as_record(self) -> dict[str, object]:
        record: dict[str, object] = {
            "deployment": self.deployment,
            "outcome": self.outcome,
            "ms": self.ms,
        }
        if self.status is not None:
            record["status"] = self.status
        return record


class Attempts:
    """The attempts of one call, in the order made; what the replay record keeps."""

    def __init__(self) -> None:
        self.made: list[Attempt] = []

    def add(self, attempt: Attempt) -> None:
        self.made.append(attempt)

    @property
    def answered_by(self) -> str | None:
        last = self.made[-1] if self.made else None
        return last.deployment if last is not None and last.outcome == "answered" else None

    def record(self) -> list[dict[str, object]]:
        return [attempt.as_record() for attempt in self.made]


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


async def first_answer(
    schema: str,
    upstreams: Sequence[Upstream],
    send: Callable[[Upstream], Awaitable[T]],
    attempts: Attempts,
) -> tuple[T, Upstream]:
    """``send`` to each deployment in turn (``in_order``) until one answers; the answer and the
    deployment that gave it. A 4xx other than 429 passes through at once; when every deployment
    failed, the last one's error is raised."""
    last: Exception | None = None
    ordered = in_order(schema, upstreams)
    for place, upstream in enumerate(ordered, start=1):
        key = (schema, upstream.name)
        started = time.monotonic()
        try:
            answer = await send(upstream)
        except UpstreamRejected as error:
            if error.status != RATE_LIMITED:
                attempts.add(Attempt(upstream.name, "rejected", _elapsed_ms(started), error.status))
                raise
            attempts.add(Attempt(upstream.name, "status", _elapsed_ms(started), error.status))
            wait = retry_after_s(
                error.headers.get("retry-after") or error.headers.get("Retry-After")
            )
            COOLDOWNS.cool(key, cooldown_s() if wait is None else wait)
            last = error
        except UpstreamUnavailable as error:
            attempts.add(
                Attempt(upstream.name, error.kind, _elapsed_ms(started), error.upstream_status)
            )
            wait = retry_after_s(error.retry_after)
            COOLDOWNS.cool(key, cooldown_s() if wait is None else wait)
            last = error
        else:
            attempts.add(Attempt(upstream.name, "answered", _elapsed_ms(started)))
            COOLDOWNS.clear(key)
            return answer, upstream
        moves_on = place < len(ordered)
        if moves_on:  # the call moves to the next deployment: a fallback
            GATEWAY_FALLBACKS.labels(upstream.name, attempts.made[-1].outcome).inc()
        logger.warning(
            "the upstream deployment %r failed (%s); %s",
            upstream.name,
            attempts.made[-1].outcome,
            "trying the next" if moves_on else "none left",
        )
    assert last is not None, "a route's call has at least one deployment"
    raise last


__all__ = [
    "COOLDOWNS",
    "Attempt",
    "Attempts",
    "Cooldowns",
    "first_answer",
    "in_order",
    "retry_after_s",
]
